"""``bertlab gradescope`` and ``bertlab classroom``: the class graded on Gradescope or GitHub Classroom."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parsers(sub) -> None:
    gradescope = sub.add_parser(
        "gradescope",
        help="instructors: write the Gradescope autograder zip of an assignment",
        description=(
            "Write the autograder zip Gradescope takes for each ASSIGNMENT: setup.sh installs the course "
            "with its pins (CPU-only torch) on Gradescope's image, and run_autograder grades the submitted "
            "notebook with the course's checks, one Gradescope test per grade cell with its points. "
            "Exit status: 0 written, 2 an assignment or the course could not be read."
        ),
        epilog="Examples: bertlab gradescope 05-feed-forward | bertlab gradescope 03-self-attention --out-dir zips",
    )
    gradescope.add_argument("assignments", nargs="+", metavar="ASSIGNMENT", help="e.g. 05-feed-forward")
    _course_option(gradescope)
    gradescope.add_argument(
        "--out-dir",
        type=Path,
        metavar="DIR",
        help="where to write ASSIGNMENT-gradescope.zip (default: the course's instructor/gradescope/)",
    )
    classroom = sub.add_parser(
        "classroom",
        help="instructors: write the GitHub Classroom workflow that grades each push",
        description=(
            "Write the GitHub Actions workflow that grades a learner's repository on each push with the "
            "course's checks and reports each grade cell's points to GitHub Classroom. Put it at "
            ".github/workflows/classroom.yml in the classroom's template repository. "
            "Exit status: 0 written, 2 an assignment or the course could not be read."
        ),
        epilog="Examples: bertlab classroom | bertlab classroom 05-feed-forward --out .github/workflows/classroom.yml",
    )
    classroom.add_argument(
        "assignments", nargs="*", metavar="ASSIGNMENT", help="assignments to grade (default: every one in solutions/)"
    )
    _course_option(classroom)
    classroom.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        help="where to write the workflow (default: the course's instructor/classroom/classroom.yml)",
    )


def _course_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--course",
        type=Path,
        metavar="DIR",
        help="the course directory, holding nbgrader_config.py and solutions/ (default: the one at or above here)",
    )


def run(args) -> int:
    from bertlab.grading.notebooks import GradingError, course_root
    from bertlab.instructor import classroom, gradescope
    from bertlab.instructor.course import CourseError
    from bertlab.settings import SettingsError

    root = args.course.resolve() if args.course else course_root(Path.cwd())
    if root is None:
        print(f"bertlab {args.command}: no nbgrader_config.py here or above (use --course DIR)", file=sys.stderr)
        return 2
    try:
        if args.command == "classroom":
            out = args.out or root / "instructor" / "classroom" / "classroom.yml"
            print(f"wrote {classroom.write(root, args.assignments, out)}: put it at .github/workflows/classroom.yml")
            return 0
        folder = args.out_dir or root / "instructor" / "gradescope"
        for assignment in args.assignments:
            zipped = gradescope.build(root, assignment, folder / f"{assignment}-gradescope.zip")
            print(f"wrote {zipped}: upload it as the assignment's autograder")
    except (CourseError, SettingsError, GradingError, OSError) as err:
        print(f"bertlab {args.command}: {err}", file=sys.stderr)
        return 2
    return 0
