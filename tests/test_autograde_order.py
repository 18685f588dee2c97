"""What ``bertlab autograde`` and ``bertlab grade`` order their work by (most first, so that a long
one is not left for the end while the other workers idle): the grade cells a submission's notebooks
hold. A file that is not a notebook, or not one nbgrader could read, counts none and never stops the
ordering. ``bertlab grade`` still reports the tasks in the course's order."""

from __future__ import annotations

import json

from bertlab.grading import runner
from bertlab.grading.results import CheckResult
from bertlab.instructor import course
from tests import submissions as sub


def _submission(tmp_path, name: str, text: str) -> course.Submission:
    folder = tmp_path / name / "05-feed-forward"
    folder.mkdir(parents=True)
    (folder / "05-feed-forward.ipynb").write_text(text)
    return course.Submission(name, "05-feed-forward", folder)


def test_grade_cells_are_counted_and_unreadable_files_count_none(tmp_path):
    nb = sub.right(sub.FFN)
    graded = sum(1 for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade"))
    assert graded > 0
    fewer = json.loads(json.dumps(nb))
    fewer["cells"] = [c for c in fewer["cells"] if not c["metadata"].get("nbgrader", {}).get("grade")][:3] + [
        c for c in fewer["cells"] if c["metadata"].get("nbgrader", {}).get("grade")
    ][:1]
    found = [
        _submission(tmp_path, "a-broken", "{not json"),
        _submission(tmp_path, "b-one", json.dumps(fewer)),
        _submission(tmp_path, "c-all", json.dumps(nb)),
        _submission(tmp_path, "d-odd", '{"cells": {"x": 1}}'),
    ]
    assert [runner.grade_cells(s.notebooks()) for s in found] == [0, 1, graded, 0]


def test_grade_starts_with_the_most_grade_cells_and_reports_in_course_order(tmp_path, monkeypatch):
    nb = sub.right(sub.FFN)
    kept = [c for c in nb.cells if not c.metadata.get("nbgrader", {}).get("grade")]
    graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert len(graded) >= 3
    for name, count in (("01-one", 1), ("02-all", len(graded)), ("03-two", 2)):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"{name}.ipynb").write_text(json.dumps({**nb, "cells": kept + graded[:count]}))
    started = []

    def fake_grade_task(name, paths, limits, pool):
        started.append(name)
        return runner.TaskResult(name, 1.0, 1.0, "passed", [CheckResult("c", True, 1.0, 1.0, "")])

    monkeypatch.setattr(runner, "grade_task", fake_grade_task)
    report = runner.grade(tmp_path, [], jobs=1)
    assert started == ["02-all", "03-two", "01-one"]
    assert [t.task for t in report.tasks] == ["01-one", "02-all", "03-two"]
