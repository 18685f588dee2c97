"""A learner's cell cannot read the class's secrets, on one machine or on a Dask worker (Linux).

Issue: from a cell of a submission, an instructor found readable the whole course folder (every
hidden test and reference solution), every classmate's submission, the gradebook, other
notebooks' working copies, the sources a worker unpacked, and every ancestor's environment in
``/proc``; a submission raised what it read into its own feedback. Where Landlock exists, the
learner's process now reads only its own folder, Python and its packages, the course's package
code and its own ``/proc`` entry (``bertlab.grading.confinement``), and starts from an
environment that never held the instructor's tokens. The hostile cell (``tests/hostile_reads.py``)
makes the notebook lose every point if one read gets through.
"""

from __future__ import annotations

import glob
import os
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from bertlab.grading.platforms.linux import landlock
from tests import hostile_reads
from tests import submissions as sub
from tests.class_submissions import SUBMITTED, graded_course
from tests.conftest import ROOT

ASSIGNMENT = sub.NUMPY
needs_landlock = pytest.mark.skipif(
    not sys.platform.startswith("linux") or landlock.abi() < 1,
    reason="this kernel has no Landlock: hidden tests are readable here (the honest-grading page says so)",
)


def _targets(course: Path, decoy: Path) -> dict[str, str]:
    """What a hostile learner would copy, in a course laid out as nbgrader has it."""
    source = f"{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
    # A disk read raw holds every file's bytes: readable where grading runs as root (CI, containers)
    disks = sorted(glob.glob("/dev/[sv]d[a-z]") + glob.glob("/dev/nvme[0-9]n[0-9]"))
    raw = {"the raw disk": next(d for d in disks if _opens(d))} if any(map(_opens, disks)) else {}
    return raw | {
        "the hidden tests": str(course / "solutions" / source),
        "the course's solutions": str(ROOT / "solutions" / source),
        "the course's folder": str(ROOT),
        "a classmate's submission": str(course / SUBMITTED / "classmate" / source),
        "every classmate's name": str(course / SUBMITTED),
        "the gradebook": str(course / "instructor" / "gradebook.db"),
        "another notebook's grading folder": str(decoy / "work" / "notebook.ipynb"),
        "the temporary folder": tempfile.gettempdir(),
        "the instructor's home": str(Path.home()),
    }


def _opens(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return bool(f.read(1))
    except OSError:  # not root, or a device the machine itself refuses
        return False


@pytest.fixture
def decoy():
    """A grading folder of another notebook in flight, named as the grader names its own."""
    folder = Path(tempfile.mkdtemp(prefix=f"bertlab-grade-{os.getpid()}-"))
    (folder / "work").mkdir()
    (folder / "work" / "notebook.ipynb").write_text('{"a classmate": "notebook"}')
    yield folder
    import shutil

    shutil.rmtree(folder)


@pytest.fixture
def secret(monkeypatch):
    """A token in the instructor's environment, inherited by every process grading starts."""
    value = uuid.uuid4().hex
    monkeypatch.setenv(hostile_reads.SECRET_NAME, value)
    return value


def _class(tmp_path: Path, decoy: Path, secret: str) -> Path:
    course = tmp_path / "course"
    course.mkdir()
    hostile = hostile_reads.guarded(sub.right(ASSIGNMENT), _targets(course, decoy), secret)
    return graded_course(course, ASSIGNMENT, {"hostile": hostile, "classmate": sub.right(ASSIGNMENT)})


def test_the_hostile_cell_reads_every_target_when_nothing_confines_it(tmp_path, decoy, secret):
    """The control: without a sandbox, each target is there and the cell reads it, so the tests
    below fail if the sandbox stops holding."""
    course = tmp_path / "course"
    for path in (course / "solutions" / ASSIGNMENT, course / SUBMITTED / "classmate" / ASSIGNMENT):
        path.mkdir(parents=True)
        (path / f"{ASSIGNMENT}.ipynb").write_text("{}")
    (course / "instructor" / "gradebook.db").write_text("")
    targets = _targets(course, decoy)
    work = tmp_path / "work"
    work.mkdir()
    through = hostile_reads.run_unconfined(targets, secret, str(work), dict(os.environ))
    for what, path in targets.items():
        assert f"{what}: {path}" in through
    assert "the instructor's token, in its environment" in through
    assert any(line.startswith("its parent's environ") for line in through)


def _assert_nothing_read(outcomes) -> None:
    full = sub.max_points(ASSIGNMENT)
    found = {o.student: (o.status, o.score, o.reason) for o in outcomes}
    assert found["hostile"][:2] == ("passed", full), found["hostile"]
    assert found["classmate"][:2] == ("passed", full), found


@pytest.mark.slow
@needs_landlock
def test_a_submission_reads_nothing_of_the_class_on_one_machine(tmp_path, decoy, secret):
    from bertlab.instructor.autograde import autograde

    course = _class(tmp_path, decoy, secret)
    _assert_nothing_read(autograde(course, [], progress=False))


@pytest.mark.slow
@needs_landlock
@pytest.mark.timeout(600)
def test_a_submission_reads_nothing_of_the_class_on_a_dask_worker(tmp_path, decoy, secret):
    """On a worker the cell also looks beside its own folder, where the worker unpacked the
    assignment's sources with their hidden tests, and reads the worker's environment."""
    from distributed import LocalCluster

    from bertlab.instructor.autograde import autograde

    course = _class(tmp_path, decoy, secret)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as local:
        _assert_nothing_read(autograde(course, [], scheduler=local.scheduler_address, progress=False))
