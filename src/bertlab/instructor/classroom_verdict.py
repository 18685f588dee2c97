"""One grade cell's verdict for GitHub Classroom's command grader: exit 0 when it earned its points.

The workflow ``bertlab classroom`` writes grades every notebook once (``bertlab grade --json``), then
runs this once per grade cell as a test of Classroom's ``autograding-command-grader``, which gives
the test its ``max-score`` (the cell's points) when the command exits 0 and nothing otherwise, as
nbgrader gives a grade cell its points or 0. The cell's message is printed for the learner.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def verdict(grades: dict, assignment: str, grade_id: str) -> tuple[bool, str]:
    """(earned, message) of grade cell ``grade_id`` of ``assignment`` in ``bertlab grade --json``'s output."""
    for task in grades.get("tasks", []):
        if task.get("task") != assignment:
            continue
        for check in task.get("checks", []):
            if check.get("name") == grade_id:
                earned = bool(check.get("passed")) and check.get("points") == check.get("max_points")
                return earned, check.get("message", "")
        return False, f"{grade_id} was not graded: is it still in {assignment}.ipynb? Copy it back from the release."
    return (
        False,
        f"{assignment} was not graded: is exercises/{assignment}/{assignment}.ipynb still there, by that name?",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bertlab.instructor.classroom_verdict")
    parser.add_argument("grades", type=Path, help="what `bertlab grade --json` printed")
    parser.add_argument("assignment")
    parser.add_argument("grade_id")
    args = parser.parse_args(argv)
    try:
        grades = json.loads(args.grades.read_text())
    except (OSError, ValueError) as err:
        print(f"the notebooks could not be graded ({err}): see the step that grades them")
        return 1
    earned, message = verdict(grades, args.assignment, args.grade_id)
    print(message)
    return 0 if earned else 1


if __name__ == "__main__":
    sys.exit(main())
