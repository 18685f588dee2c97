"""Benchmark: grading a class with ``bertlab autograde --jobs 2``, ``--jobs 1`` and ``nbgrader autograde``.

Builds a class of N submissions from the real exercises (tests/class_submissions.py, without the
one that hangs, whose time would be its timeout), grades it three times in the same run, each in
its own copy of the course, checks that the three gradebooks hold the same scores, and merges
into the results file:

- ``class_speedup``: seconds of ``--jobs 1`` over seconds of ``--jobs 2``;
- ``speedup_vs_nbgrader``: seconds of ``nbgrader autograde`` over seconds of ``--jobs 2``;
- ``class_grading``: the seconds, the class size, the machine and its load.

Usage::

    python -m bench.class_grading [--submissions 40] [--out bench/results.json]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.results import machine, merge
from tests.class_submissions import roster, write_class, write_course

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WAYS = ("bertlab autograde --jobs 2", "bertlab autograde --jobs 1", "nbgrader autograde")


def timed(args: list[str], cwd: Path) -> float:
    """Wall seconds of one command, which must succeed (nbgrader: 1 when a submission is unreadable)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode not in ((0, 1) if args[2] == "nbgrader" else (0,)):
        raise RuntimeError(f"{' '.join(args[1:])} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return seconds


def _scores(course: Path) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course}/instructor/gradebook.db", "bertlab") as gb:
        return {f"{s.student.id}/{s.assignment.name}/{g.name}": float(g.score)
                for a in gb.assignments for s in a.submissions for nb in s.notebooks for g in nb.grades}


def run(submissions: int, timeout: float) -> dict:
    students = roster(submissions, hangs=False)
    assignments = sorted({s.assignment for s in students})
    seconds = {}
    with tempfile.TemporaryDirectory(prefix="bertlab-class-bench-") as tmp:
        courses = {}
        for way in WAYS:
            course = write_course(Path(tmp) / way.replace(" ", "-"), set(assignments))
            for name in assignments:  # records the grade cells in the gradebook; not timed
                timed([sys.executable, "-m", "nbgrader", "generate_assignment", name, "--force"], course)
            write_class(course, students)
            courses[way] = course
        load_before = os.getloadavg()[0]
        for way, course in courses.items():
            if way.startswith("bertlab"):
                jobs = way.rsplit(" ", 1)[-1]
                seconds[way] = timed([sys.executable, "-m", "bertlab.cli", "autograde", "--course", str(course),
                                      "--jobs", jobs, "--timeout", str(timeout), "--force"], ROOT)
            else:
                seconds[way] = sum(timed([sys.executable, "-m", "nbgrader", "autograde", name, "--force"], course)
                                   for name in assignments)
        scores = {way: _scores(course) for way, course in courses.items()}
    same = all(scores[way] == scores[WAYS[0]] for way in WAYS)
    base = seconds[WAYS[0]]
    return {
        "class_speedup": seconds[WAYS[1]] / base,
        "speedup_vs_nbgrader": seconds[WAYS[2]] / base,
        "class_grading": {
            "what": "a class graded into nbgrader's gradebook, each way in its own copy of the course",
            "submissions": len(students),
            "assignments": assignments,
            "seconds": seconds,
            "same_scores": same,
            "grade_cells": len(scores[WAYS[0]]),
            "machine": {**machine(), "load_average_1min_before": load_before},
        },
    }


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=40, help="class size (default 40)")
    parser.add_argument("--timeout", type=float, default=300.0, help="bertlab autograde's limit per notebook")
    parser.add_argument("--out", type=Path, default=HERE / "results.json", help="results file, merged into")
    args = parser.parse_args(argv)
    report = run(args.submissions, args.timeout)
    merge(args.out, report)  # other benchmarks' keys stay
    grading = report["class_grading"]
    print(", ".join(f"{way} {s:.1f} s" for way, s in grading["seconds"].items()))
    print(f"class_speedup x{report['class_speedup']:.2f}, speedup_vs_nbgrader x{report['speedup_vs_nbgrader']:.2f}, "
          f"same scores: {grading['same_scores']}; written to {args.out}")
    return args.out


if __name__ == "__main__":
    main()
