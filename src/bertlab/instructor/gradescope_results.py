"""A verdict as Gradescope's ``results.json``: one test per grade cell of the assignment's source.

The tests, their points and their order come from the nbgrader source notebook's grade cells,
the ones ``nbgrader autograde`` and ``bertlab autograde`` score, so the three agree by
construction on what there is to earn. A grade cell with hidden tests is shown to learners only
once the instructor publishes the grades (``after_published``): its message can say what a hidden
test fed the learner's code. Gradescope then hides the total until publication too.
"""

from __future__ import annotations

import re

from bertlab.grading.results import CheckResult, grade_cell_meta

HIDDEN_MARK = "### BEGIN HIDDEN TESTS"
# A grade cell's first line, "# Task 5.1, names and shapes: ... (1 point)", names the test.
_POINTS_SUFFIX = re.compile(r"\s*\(\d+(\.\d+)? points?\)\s*$")


def grade_cells(source) -> list[dict]:
    """(grade_id, name, points, hidden) of each grade cell of the source notebook, in its order."""
    cells = []
    for cell in source.cells:
        meta = grade_cell_meta(cell)
        if not meta:
            continue
        text = "".join(cell.get("source", ""))
        first = text.splitlines()[0] if text.strip() else ""
        name = _POINTS_SUFFIX.sub("", first[2:]) if first.startswith("# ") else meta["grade_id"]
        cells.append(
            {
                "grade_id": meta["grade_id"],
                "name": name,
                "points": float(meta.get("points", 0)),
                "hidden": HIDDEN_MARK in text,
            }
        )
    return cells


def results(
    assignment: str,
    source,
    checks: list[CheckResult],
    status: str,
    seconds: float,
    version: str,
    reason: str | None = None,
) -> dict:
    """results.json for ``checks`` (a grade cell without a check scores 0, as nbgrader scores a
    cell it never reached); ``reason`` says why the notebook could not be graded."""
    verdicts = {c.name: c for c in checks}
    tests = []
    for number, cell in enumerate(grade_cells(source), start=1):
        check = verdicts.get(cell["grade_id"])
        score = check.points if check else 0.0
        tests.append(
            {
                "name": cell["name"],
                "number": str(number),
                "score": score,
                "max_score": cell["points"],
                "status": "passed" if check is not None and check.passed else "failed",
                "output": check.message if check else (reason or "this grade cell was not graded"),
                "visibility": "after_published" if cell["hidden"] else "visible",
                "tags": [cell["grade_id"], *(check.tasks if check else [])],
                "extra_data": {"grade_id": cell["grade_id"], "mistake": check.mistake if check else None},
            }
        )
    score, max_score = sum(t["score"] for t in tests), sum(t["max_score"] for t in tests)
    said = f"{assignment}: {score:g}/{max_score:g} ({status}), graded by bertlab {version}."
    return {
        "score": score,
        "execution_time": round(seconds),
        "output": f"{said}\n{reason}" if reason else said,
        # The grader's own log, never the learner's: it may name the files of the autograder.
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {"assignment": assignment, "status": status, "bertlab": version, "max_score": max_score},
    }
