"""SIGTERM (what a scheduler, `timeout` or a CI runner sends) stops `bertlab autograde` as Ctrl-C
does: the submissions recorded are kept, the run says which are left and that it was terminated,
exits 143, and leaves no learner's process, judge or notebook copy behind.

The class: two submissions graded in full, and one that starts a detached `sleep` and then waits
for ever; the command is sent SIGTERM once the two are recorded, while the third is being judged.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid

import nbformat
import pytest

from bertlab.instructor.autograde import PENDING, STATE_FILE
from tests import submissions as sub
from tests.class_submissions import graded_course
from tests.conftest import ROOT
from tests.grading_paths import gone_within, path_env
from tests.test_escaped_processes import ESCAPES, MARKER, detached_sleep

pytestmark = pytest.mark.slow  # a class graded end to end

ASSIGNMENT = sub.FFN
HANGS = "s0-hangs"  # first: with two judges, the other one grades s1 and s2 meanwhile
GRADED = ["s1", "s2"]


def _hangs():
    nb = sub.exercise(ASSIGNMENT)
    wait = "import time\n\nwhile True:\n    time.sleep(1)\n"
    nb.cells[:0] = [nbformat.v4.new_code_cell(ESCAPES["setsid-subprocess"]), nbformat.v4.new_code_cell(wait)]
    return nb


def _state(course) -> dict:
    path = course / "instructor" / "autograded" / STATE_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # not written yet, or being written
        return {}


def _recorded(course) -> list[str]:
    return sorted(k.split("/")[0] for k, v in _state(course).items() if v.get("fingerprint") != PENDING)


def test_sigterm_mid_run_keeps_what_was_recorded_and_leaves_nothing(tmp_path):
    from nbgrader.api import Gradebook, MissingEntry

    course = graded_course(
        tmp_path / "course", ASSIGNMENT, {HANGS: _hangs(), **{s: sub.right(ASSIGNMENT) for s in GRADED}}
    )
    temp = tmp_path / "temp"
    temp.mkdir()
    marker = uuid.uuid4().hex
    client = subprocess.Popen(
        [sys.executable, "-m", "bertlab.cli", "autograde", "--course", str(course), "--jobs", "2", "--json"],
        cwd=ROOT,
        env={**path_env("linux"), MARKER: marker, "TMPDIR": str(temp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        detached_sleep(marker, seconds=300)
        deadline = time.monotonic() + 300
        while _recorded(course) != GRADED and client.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _recorded(course) == GRADED, "the two other submissions were never recorded"
        assert [p for p in temp.iterdir() if p.name.startswith("bertlab-")], "no copy: nothing to clean up"
        client.send_signal(signal.SIGTERM)
        out, err = client.communicate(timeout=60)
    finally:
        client.kill()
    assert client.returncode == 143, err
    assert "2 of 3 submission(s) graded and recorded; the other 1 are left for the next run" in err, err
    assert f"{HANGS}/{ASSIGNMENT}" in err, err
    assert "bertlab autograde: terminated (SIGTERM); what was recorded is kept" in err, err
    assert out == "", "a terminated run prints no outcomes"
    assert _recorded(course) == GRADED and _state(course)[f"{HANGS}/{ASSIGNMENT}"]["fingerprint"] == PENDING
    with Gradebook(f"sqlite:///{course / 'instructor' / 'gradebook.db'}", "bertlab") as gb:
        assert all(gb.find_submission(ASSIGNMENT, s).max_score > 0 for s in GRADED)
        with pytest.raises(MissingEntry):
            gb.find_submission(ASSIGNMENT, HANGS)
    assert not gone_within(MARKER, marker, 10)
    assert not [p.name for p in temp.iterdir() if p.name.startswith("bertlab-")]
