"""A rerun of ``bertlab autograde --json`` reports each submission it skipped as unchanged with the
score its last grading recorded in the gradebook, not 0: a script summing the JSON reads the
class's grades. The judges are stand-ins that give some students every point and the others none,
so that the recorded scores differ from each other and from 0.
"""

from __future__ import annotations

import json

import pytest

from bertlab import cli
from bertlab.grading import notebooks
from bertlab.grading.runner import TaskResult, failed_all
from bertlab.instructor import local_judges
from tests import submissions as sub
from tests.class_submissions import graded_course

pytestmark = pytest.mark.slow  # a class recorded through nbgrader

ASSIGNMENT = sub.NUMPY
PASSING = {"s0", "s2"}  # the stand-ins give these students every point, the others none


class StandInJudges:
    """Judges that give each grade cell of a passing student its points at once, others 0."""

    def __init__(self, jobs: int):
        pass

    def describe(self) -> str:
        return "stand-in judges"

    def judged(self, todo, limits):
        for submission in todo:
            checks = [c for path in submission.notebooks() for c in failed_all(notebooks.read(path), "stand-in")]
            if submission.student in PASSING:
                for check in checks:
                    check.passed, check.points, check.message = True, check.max_points, ""
            score, max_score = sum(c.points for c in checks), sum(c.max_points for c in checks)
            status = "passed" if submission.student in PASSING else "failed"
            yield submission, TaskResult(submission.assignment, score, max_score, status, checks)

    def close(self) -> None:
        pass


def autograde_json(course, capsys, *extra: str) -> dict[str, dict]:
    assert cli.main(["autograde", "--course", str(course), "--json", *extra]) == 0
    return {o["student"]: o for o in json.loads(capsys.readouterr().out)}


def test_a_rerun_reports_the_recorded_scores_of_what_it_skipped(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(local_judges, "LocalJudges", StandInJudges)
    course = graded_course(tmp_path, ASSIGNMENT, {s: sub.exercise(ASSIGNMENT) for s in ("s0", "s1", "s2")})
    first = autograde_json(course, capsys)
    assert {s: o["status"] for s, o in first.items()} == {"s0": "passed", "s1": "failed", "s2": "passed"}
    assert first["s0"]["score"] == first["s0"]["max_score"] > 0 and first["s1"]["score"] == 0, first
    again = autograde_json(course, capsys)
    for student, recorded in first.items():
        skipped = again[student]
        assert skipped["status"] == "skipped" and "unchanged" in skipped["reason"], skipped
        assert (skipped["score"], skipped["max_score"]) == (recorded["score"], recorded["max_score"]), skipped


def test_an_unchanged_submission_the_gradebook_no_longer_holds_is_graded_again(tmp_path, capsys, monkeypatch):
    """Its recorded score is gone (the submission removed with nbgrader's Gradebook API): there is
    nothing true to report as skipped, so it is graded again."""
    from nbgrader.api import Gradebook

    monkeypatch.setattr(local_judges, "LocalJudges", StandInJudges)
    course = graded_course(tmp_path, ASSIGNMENT, {s: sub.exercise(ASSIGNMENT) for s in ("s0", "s1")})
    first = autograde_json(course, capsys)
    with Gradebook(f"sqlite:///{course / 'instructor' / 'gradebook.db'}", "bertlab") as gb:
        gb.remove_submission(ASSIGNMENT, "s0")
    again = autograde_json(course, capsys)
    assert again["s0"] == {**first["s0"], "seconds": again["s0"]["seconds"]}, again
    assert again["s1"]["status"] == "skipped", again
