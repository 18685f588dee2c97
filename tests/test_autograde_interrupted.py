"""A run of ``bertlab autograde`` stopped half-way accounts for every submission it set out to grade.

Each submission of a run ends in exactly one of: graded and recorded, or left for the next run;
and "left for the next run" is true whatever the stopped run's flags were (``--force`` included):
the next plain run grades exactly those. The run is stopped at several points: before any
verdict, between two verdicts (Ctrl-C, a worker refused), and while a verdict is being recorded.
The judges here are stand-ins that give every grade cell 0 at once: what is tested is the
accounting, not the judging.
"""

from __future__ import annotations

import pytest

from bertlab.grading import notebooks
from bertlab.grading.pool import Limits
from bertlab.grading.runner import TaskResult, failed_all
from bertlab.instructor import autograde as autograde_mod
from bertlab.instructor.cluster_judges import ClusterError
from tests import submissions as sub
from tests.class_submissions import graded_course

pytestmark = pytest.mark.slow  # a class graded through nbgrader

ASSIGNMENT = sub.NUMPY
STUDENTS = [f"s{i}" for i in range(5)]


class StandInJudges:
    """Judges that give each submission 0 at once, and raise ``stop`` before the ``at``-th verdict."""

    def __init__(self, at: int | None = None, stop: BaseException | None = None):
        self.at, self.stop = at, stop
        self.seen: list[str] = []

    def describe(self) -> str:
        return "stand-in judges"

    def judged(self, todo, limits):
        for i, submission in enumerate(todo):
            if i == self.at:
                raise self.stop
            self.seen.append(submission.key)
            checks = [c for path in submission.notebooks() for c in failed_all(notebooks.read(path), "stand-in")]
            yield (
                submission,
                TaskResult(submission.assignment, 0.0, sum(c.max_points for c in checks), "failed", checks),
            )

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def course_template(tmp_path_factory):
    students = {student: sub.exercise(ASSIGNMENT) for student in STUDENTS}
    return graded_course(tmp_path_factory.mktemp("course"), ASSIGNMENT, students)


@pytest.fixture
def course(course_template, tmp_path):
    import shutil

    shutil.copytree(course_template, tmp_path / "course")
    return tmp_path / "course"


def run(course, judges, force=False):
    return autograde_mod._grade_all(course, [], None, Limits(60, 1024), force, False, judges)


def graded_by(course, judges, force=False) -> list[str]:
    run(course, judges, force)
    return sorted(judges.seen)


@pytest.mark.parametrize("force", [False, True], ids=["plain", "forced"])
@pytest.mark.parametrize(
    "at, stop",
    [
        (0, KeyboardInterrupt()),
        (2, KeyboardInterrupt()),
        (4, ClusterError("the worker at tcp://10.0.0.9:4000 has bertlab 0.0.1")),
    ],
    ids=["before-any-verdict", "ctrl-c-mid-run", "refused-before-the-last"],
)
def test_a_stopped_run_leaves_exactly_the_rest_to_the_next_run(course, capsys, force, at, stop):
    if force:  # everything graded once: the forced run regrades what did not change since
        run(course, StandInJudges())
        capsys.readouterr()
    stopped = StandInJudges(at, stop)
    with pytest.raises(type(stop)):
        run(course, stopped, force=force)
    said = capsys.readouterr().err
    todo = [f"{s}/{ASSIGNMENT}" for s in STUDENTS]  # new (plain), or graded before and forced
    left = sorted(set(todo) - set(stopped.seen))
    assert len(left) == len(todo) - at
    assert f"{at} of {len(todo)} submission(s) graded and recorded" in said, said
    assert f"the other {len(left)} are left for the next run" in said and all(k in said for k in left), said
    next_run = StandInJudges()
    assert graded_by(course, next_run) == left, "the next plain run must grade exactly what was left"


def test_a_run_stopped_while_recording_leaves_that_submission_too(course, capsys, monkeypatch):
    recorded, real = [], autograde_mod._record

    def record_then_stop(config, coursedir, submission, result):
        if len(recorded) == 2:
            raise KeyboardInterrupt  # Ctrl-C while nbgrader writes the third verdict
        recorded.append(submission.key)
        return real(config, coursedir, submission, result)

    monkeypatch.setattr(autograde_mod, "_record", record_then_stop)
    with pytest.raises(KeyboardInterrupt):
        run(course, StandInJudges())
    monkeypatch.setattr(autograde_mod, "_record", real)
    said = capsys.readouterr().err
    assert "2 of 5 submission(s) graded and recorded; the other 3 are left for the next run" in said, said
    left = sorted(set(f"{s}/{ASSIGNMENT}" for s in STUDENTS) - set(recorded))
    assert graded_by(course, StandInJudges()) == left
