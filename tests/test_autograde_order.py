"""What ``bertlab autograde`` orders submissions by (most first, so that a long one is not left for
the end while the other workers idle): the grade cells a submission's notebooks hold. A file that is
not a notebook, or not one nbgrader could read, counts none and never stops the ordering."""

from __future__ import annotations

import json

from bertlab.instructor import course
from bertlab.instructor.autograde import _checks_to_run
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
    fewer["cells"] = [c for c in fewer["cells"] if not c["metadata"].get("nbgrader", {}).get("grade")][:3] + \
        [c for c in fewer["cells"] if c["metadata"].get("nbgrader", {}).get("grade")][:1]
    found = [_submission(tmp_path, "a-broken", "{not json"), _submission(tmp_path, "b-one", json.dumps(fewer)),
             _submission(tmp_path, "c-all", json.dumps(nb)), _submission(tmp_path, "d-odd", '{"cells": {"x": 1}}')]
    assert [_checks_to_run(s) for s in found] == [0, 1, graded, 0]
