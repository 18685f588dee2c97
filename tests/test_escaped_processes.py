"""A learner's cell that starts a process and detaches it (``setsid``, a double fork) leaves nothing
running once its notebook is graded, on the Linux path, however the grading ended.

The learner's process and its template are subreapers: whatever the learner's code starts stays
below them however it detaches, and the judge ends that whole tree when the notebook is done;
the template ends it too when its judge is killed. The portable path has no such interface: the
honest-grading page says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import nbformat
import psutil
import pytest

from tests.conftest import ROOT
from tests.grading_paths import gone_within, judge_of, path_env, processes_with

pytestmark = pytest.mark.slow
TASK = "05-feed-forward"
MARKER = "BERTLAB_TEST_RUN"

# Each form starts a process that outlives its cell, detached from the learner's process group.
ESCAPES = {
    "setsid-subprocess": "import subprocess\nsubprocess.Popen(['sleep', '600'], start_new_session=True)",
    "double-fork": (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(600)\n"
        "    os._exit(0)\n"
    ),
}


def course(folder: Path, escape: str, then: str = "") -> Path:
    (folder / TASK).mkdir(parents=True)
    nb = nbformat.read(ROOT / "solutions" / TASK / f"{TASK}.ipynb", as_version=4)
    nb.cells[:0] = [nbformat.v4.new_code_cell(escape)] + ([nbformat.v4.new_code_cell(then)] if then else [])
    nbformat.write(nb, folder / TASK / f"{TASK}.ipynb")
    return folder


def detached_sleep(marker: str, seconds: float = 120) -> psutil.Process:
    """The `sleep` a notebook's first cell detached, once it runs: the notebook is being graded."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = [p for p in processes_with(MARKER, marker) if p.name() == "sleep"]
        if found:
            return found[0]
        time.sleep(0.2)
    raise AssertionError("the detached child never started: the notebook was never run")


@pytest.mark.parametrize("form", ESCAPES)
def test_a_detached_child_is_ended_with_its_notebook(tmp_path, form):
    marker = uuid.uuid4().hex
    folder = course(tmp_path, ESCAPES[form])
    proc = subprocess.run(
        [sys.executable, "-m", "bertlab.cli", "grade", "--cold", "--path", str(folder), "--json", "--no-progress"],
        cwd=ROOT,
        env={**path_env("linux"), MARKER: marker},
        capture_output=True,
        text=True,
        timeout=600,
    )
    task = json.loads(proc.stdout)["tasks"][0]
    assert task["score"] == task["max_score"] > 0, task  # the escape costs no point: it is not graded
    left = gone_within(MARKER, marker, 10)
    assert not left, f"still running after `bertlab grade` ended: {left}"


def test_a_detached_child_is_ended_when_its_judge_is_killed(tmp_path):
    """The judge is killed outright while the notebook loops after detaching a child: the
    template, in a session of its own, sees its judge gone and ends everything it adopted."""
    marker = uuid.uuid4().hex
    folder = course(tmp_path, ESCAPES["setsid-subprocess"], then="while True:\n    pass")
    client = subprocess.Popen(
        [sys.executable, "-m", "bertlab.cli", "grade", "--cold", "--path", str(folder), "--json", "--no-progress"],
        cwd=ROOT,
        env={**path_env("linux"), MARKER: marker},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        sleeping = detached_sleep(marker)
        learner = sleeping.parent()  # `sleep` left the learner's session, not its parent, which loops
        judge_of(learner, client.pid, "linux").kill()  # the judge, forked by the factory (a child of the command)
        client.communicate(timeout=120)
    finally:
        client.kill()
    left = gone_within(MARKER, marker, 10)
    assert not left, f"still running after the judge was killed: {left}"


def test_nothing_outlives_a_killed_grade_command_and_its_folders_are_swept(tmp_path):
    """`bertlab grade` is killed outright (SIGKILL: it cleans up nothing) while a notebook loops:
    its judge sees the command gone and ends its tree at once, the learner's loop with it. The
    folders it left, with the learner's notebook, go at the next start of a pool."""
    from bertlab.grading import scratch

    marker = uuid.uuid4().hex
    folder = course(tmp_path, ESCAPES["setsid-subprocess"], then="while True:\n    pass")
    temp = tmp_path / "temp"
    temp.mkdir()
    client = subprocess.Popen(
        [sys.executable, "-m", "bertlab.cli", "grade", "--cold", "--path", str(folder), "--json", "--no-progress"],
        cwd=ROOT,
        env={**path_env("linux"), MARKER: marker, "TMPDIR": str(temp)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        detached_sleep(marker)
        client.kill()
        client.wait()
        killed = time.monotonic()
        left = gone_within(MARKER, marker, 5)
        assert not left, f"still running after `bertlab grade` was killed: {left}"
        print(f"everything of the killed command ended within {time.monotonic() - killed:.2f} s")
    finally:
        client.kill()
    kept = [p.name for p in temp.iterdir() if p.name.startswith(f"bertlab-grade-{client.pid}-")]
    assert kept, "the killed command left no folder: the sweep below would test nothing"
    swept = scratch.sweep(str(temp))
    assert {p.name for p in swept} >= set(kept), (kept, swept)
    assert not any(p.name.startswith("bertlab-") for p in temp.iterdir()), list(temp.iterdir())


def test_the_sweep_keeps_the_folders_of_living_processes_and_other_names(tmp_path):
    from bertlab.grading import scratch

    dead = subprocess.Popen(["true"])
    dead.wait()
    mine = tmp_path / f"bertlab-grade-{os.getpid()}-abc"
    gone = tmp_path / f"bertlab-submission-{dead.pid}-xyz"
    other = tmp_path / "bertlab-notes"
    for path in (mine, gone, other):
        path.mkdir()
        (path / "notebook.ipynb").write_text("{}")
    assert scratch.sweep(str(tmp_path)) == [gone]
    assert mine.exists() and other.exists() and not gone.exists()


def test_a_submission_that_signals_the_graders_processes_kills_none(tmp_path):
    """The hostile cell (``tests/hostile.py``) sends SIGKILL to every process above its own, the
    learner's template, the judge factory and the grade command among them: the kernel refuses
    each (Landlock's signal scope), the command ends normally and the notebook earns what its
    code computes, in full here."""
    from bertlab.grading.platforms.linux import landlock
    from tests import hostile

    if landlock.abi() < 6:
        pytest.skip("this kernel cannot scope signals (Landlock ABI 6, Linux 6.12): the site says so")
    marker = uuid.uuid4().hex
    folder = course(tmp_path, hostile.CELL)
    proc = subprocess.run(
        [sys.executable, "-m", "bertlab.cli", "grade", "--cold", "--path", str(folder), "--json", "--no-progress"],
        cwd=ROOT,
        env={**path_env("linux"), MARKER: marker},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    task = json.loads(proc.stdout)["tasks"][0]
    assert task["score"] == task["max_score"] > 0, task
    assert not gone_within(MARKER, marker, 10)


@pytest.mark.parametrize(
    "sig, said, status",
    [("SIGINT", "stopped (Ctrl-C)", 130), ("SIGTERM", "terminated (SIGTERM)", 143)],
    ids=["ctrl-c", "sigterm"],
)
def test_ctrl_c_or_sigterm_on_a_grade_says_interrupted_not_a_verdict(tmp_path, sig, said, status):
    """Ctrl-C, or SIGTERM (a scheduler, `timeout`), while a notebook is graded: its line says
    "interrupted", not the "error, 0/9" that stopping its judge would otherwise produce, the command
    says what stopped it, nothing runs on and no copy of the notebook is left in the temporary folder."""
    import signal

    marker = uuid.uuid4().hex
    folder = course(tmp_path, ESCAPES["setsid-subprocess"], then="while True:\n    pass")
    temp = tmp_path / "temp"
    temp.mkdir()
    client = subprocess.Popen(
        [sys.executable, "-m", "bertlab.cli", "grade", "--cold", "--path", str(folder)],
        cwd=ROOT,
        env={**path_env("linux"), MARKER: marker, "TMPDIR": str(temp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )
    try:
        detached_sleep(marker)
        assert [p for p in temp.iterdir() if p.name.startswith("bertlab-")], "no copy: nothing to clean up"
        client.send_signal(getattr(signal, sig))
        out, err = client.communicate(timeout=60)
    finally:
        client.kill()
    assert client.returncode == status, err
    assert f"{TASK}: interrupted" in err and "0/9" not in err + out, err
    assert f"bertlab grade: {said}; nothing was written" in err, err
    assert not gone_within(MARKER, marker, 10)
    assert not [p.name for p in temp.iterdir() if p.name.startswith("bertlab-")]
