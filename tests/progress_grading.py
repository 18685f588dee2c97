"""The graded copy of exercises/ that the Progress page's tests and the hint ladders' read.

Task 5 solved, Task 3 with a known values mistake (no 1/sqrt(head_size) scaling), Task 4 as
released (stubs), graded once by ``bertlab grade``. The fixture is registered once, in
``tests/conftest.py``: a test module importing it would define a second one, graded again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import submissions

ROOT = Path(__file__).resolve().parents[1]

ATTENTION, ADD_NORM, FFN = submissions.ATTENTION, submissions.ADD_NORM, submissions.FFN
NO_SCALING = ("(query @ key.transpose(-1, -2)) * scaling", "(query @ key.transpose(-1, -2))")


def _mutated(nb, old: str, new: str):
    """``nb`` with ``old`` replaced in the one solution cell that holds it (once)."""
    cells = [c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution") and old in c.source]
    assert len(cells) == 1 and cells[0].source.count(old) == 1, f"{old!r} is not in exactly one solution cell"
    cells[0].source = cells[0].source.replace(old, new)
    return nb


def _bertlab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg"}
    return subprocess.run(
        [sys.executable, "-m", "bertlab.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


# Session-wide: xdist may run other modules' tests between this module's, which would tear a
# module fixture down and build it again (grading again costs seconds).
@pytest.fixture(scope="session")
def graded(tmp_path_factory):
    """(report as JSON, progress directory, the learner's exercises copy) after one grading run."""
    import nbformat

    work = tmp_path_factory.mktemp("learner")
    exercises = work / "exercises"
    shutil.copytree(ROOT / "exercises", exercises)
    nbformat.write(submissions.right(FFN), exercises / FFN / f"{FFN}.ipynb")
    nbformat.write(_mutated(submissions.right(ATTENTION), *NO_SCALING), exercises / ATTENTION / f"{ATTENTION}.ipynb")
    # ADD_NORM stays as released: stubs that raise NotImplementedError.
    before = {p: p.read_bytes() for p in exercises.rglob("*.ipynb")}
    out = work / "site"
    proc = _bertlab(
        "grade",
        "03",
        "04",
        "05",
        "--path",
        str(exercises),
        "--progress-dir",
        str(out),
        "--json",
        "--jobs",
        "2",
        cwd=work,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]  # some checks fail, on purpose
    after = {p: p.read_bytes() for p in exercises.rglob("*.ipynb")}
    assert after == before, "grading wrote to the learner's notebooks"
    return json.loads(proc.stdout), out, exercises
