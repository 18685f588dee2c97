"""Benchmark: grading a class with ``bertlab autograde --jobs 2``, ``--jobs 1`` and ``nbgrader autograde``.

Builds a class of N submissions from the real exercises (tests/class_submissions.py, without the
one that hangs, whose time would be its timeout), grades it each way in its own copy of the
course, checks that the gradebooks hold the same scores, and merges into the results file:

- ``class_speedup``: seconds of ``--jobs 1`` over seconds of ``--jobs 2``, the median of
  ``--rounds`` pairs run back to back (the order alternating, so neither side always runs on a
  cache the other warmed): a shared machine's load drifts over minutes, a pair shares it;
- ``speedup_vs_nbgrader``: seconds of one ``nbgrader autograde`` over the median of ``--jobs 2``;
- ``class_grading``: every run's seconds, the class size, the machine and its load.

Before anything is timed, one untimed process imports torch and transformers and loads the
model, so the first timed command does not pay for a cold disk.

Usage::

    python -m bench.class_grading [--submissions 40] [--rounds 3] [--out bench/results.json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.class_submissions import roster, write_class, write_course

from bench.results import machine, merge

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WAYS = ("bertlab autograde --jobs 2", "bertlab autograde --jobs 1", "nbgrader autograde")
# What every grading command loads first: once, untimed, so no timed command reads a cold disk.
WARM_UP = "import torch, transformers; from bertlab import capture; capture.capture()"


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
        return {
            f"{s.student.id}/{s.assignment.name}/{g.name}": float(g.score)
            for a in gb.assignments
            for s in a.submissions
            for nb in s.notebooks
            for g in nb.grades
        }


def run(submissions: int, timeout: float, rounds: int) -> dict:
    students = roster(submissions, hangs=False)
    assignments = sorted({s.assignment for s in students})
    runs: dict[str, list[float]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory(prefix="bertlab-class-bench-") as tmp:
        source = write_course(Path(tmp) / "source", set(assignments))
        for name in assignments:  # records the grade cells in the gradebook; not timed
            timed([sys.executable, "-m", "nbgrader", "generate_assignment", name, "--force"], source)
        courses = {}
        for way in WAYS:  # each way a copy of that course (its release and gradebook), then the class
            courses[way] = Path(shutil.copytree(source, Path(tmp) / way.replace(" ", "-")))
            write_class(courses[way], students)
        subprocess.run([sys.executable, "-c", WARM_UP], cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=True)
        load_before = os.getloadavg()[0]

        def bertlab(way: str) -> float:
            return timed(
                [
                    sys.executable,
                    "-m",
                    "bertlab.cli",
                    "autograde",
                    "--course",
                    str(courses[way]),
                    "--jobs",
                    way.rsplit(" ", 1)[-1],
                    "--timeout",
                    str(timeout),
                    "--force",
                ],
                ROOT,
            )

        for round_ in range(rounds):
            pair = WAYS[:2] if round_ % 2 == 0 else WAYS[1::-1]
            for way in pair:
                runs[way].append(bertlab(way))
        runs[WAYS[2]].append(
            sum(
                timed([sys.executable, "-m", "nbgrader", "autograde", name, "--force"], courses[WAYS[2]])
                for name in assignments
            )
        )
        scores = {way: _scores(course) for way, course in courses.items()}
    same = all(scores[way] == scores[WAYS[0]] for way in WAYS)
    jobs2 = statistics.median(runs[WAYS[0]])
    return {
        "class_speedup": statistics.median(one / two for two, one in zip(runs[WAYS[0]], runs[WAYS[1]], strict=True)),
        "speedup_vs_nbgrader": runs[WAYS[2]][0] / jobs2,
        "class_grading": {
            "what": "a class graded into nbgrader's gradebook, each way in its own copy of the course",
            "submissions": len(students),
            "assignments": assignments,
            "rounds": rounds,
            "seconds": {way: statistics.median(times) for way, times in runs.items()},
            "runs": runs,
            "same_scores": same,
            "grade_cells": len(scores[WAYS[0]]),
            "machine": {**machine(), "load_average_1min_before": load_before},
        },
    }


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=40, help="class size (default 40)")
    parser.add_argument("--rounds", type=int, default=3, help="pairs of --jobs 2 and --jobs 1 runs (default 3)")
    parser.add_argument("--timeout", type=float, default=300.0, help="bertlab autograde's limit per notebook")
    parser.add_argument("--out", type=Path, default=HERE / "results.json", help="results file, merged into")
    args = parser.parse_args(argv)
    report = run(args.submissions, args.timeout, args.rounds)
    merge(args.out, report)  # other benchmarks' keys stay
    grading = report["class_grading"]
    print(", ".join(f"{way} {s:.1f} s" for way, s in grading["seconds"].items()))
    print(
        f"class_speedup x{report['class_speedup']:.2f}, speedup_vs_nbgrader x{report['speedup_vs_nbgrader']:.2f}, "
        f"same scores: {grading['same_scores']}; written to {args.out}"
    )
    return args.out


if __name__ == "__main__":
    main()
