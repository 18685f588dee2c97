"""Benchmark: a class graded on a Dask ``LocalCluster`` of one and of two single-threaded workers,
and by ``bertlab autograde --jobs 2``, in the same run; what it costs per submission, to project.

Each way grades the class (tests/class_submissions.py, without the submission that hangs) in its
own copy of the course. A cluster's judges are warmed first by an untimed run of one submission,
as a cluster that grades class after class keeps them warm. Merged into the results file:

- ``cluster_per_worker_efficiency``: submissions per worker-minute with two workers over one
  worker's (1.0: the second worker adds as much as the first);
- ``cluster_vs_jobs2``: the two-worker cluster's seconds over ``--jobs 2``'s on this machine;
- ``cluster_core_s_per_submission``: processor seconds the workers' processes (worker, judges,
  learner processes) spent per submission, on one worker;
- ``cluster_serial_s_per_submission``: processor seconds the instructor's command spent per
  submission beyond its start (nbgrader's recording into the gradebook: what does not spread
  over workers), from the timed run against the warm-up run of one;
- ``cluster_5000_on_{1,10,100}_workers_h``: a class of 5,000 projected from those: the workers'
  time at this efficiency, or the serial recording's, whichever is longer;
- ``cluster_grading``: every run's seconds, the class size, the machine and its load.

Usage::

    python -m bench.cluster_grading [--submissions 40] [--out bench/results.json]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.class_submissions import roster, write_class, write_course

from bench.results import machine, merge

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PROJECTED_CLASS = 5000
PROJECTED_WORKERS = (1, 10, 100)


def _cpu_seconds_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def autograde(course: Path, *options: str) -> tuple[float, float]:
    """(wall seconds, processor seconds) of one ``bertlab autograde --force`` of ``course``."""
    cpu, start = _cpu_seconds_of_children(), time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "bertlab.cli", "autograde", "--course", str(course), "--force", *options],
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
    )
    seconds, cpu = time.perf_counter() - start, _cpu_seconds_of_children() - cpu
    if proc.returncode != 0:
        raise RuntimeError(f"bertlab autograde {' '.join(options)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return seconds, cpu


def _tree_cpu_seconds(client) -> float:
    """Processor seconds of every worker process and its descendants so far (ended ones reaped
    by them included)."""
    import psutil

    total = 0.0
    for pid in client.run(os.getpid).values():
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            try:
                t = proc.cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system + t.children_user + t.children_system
    return total


def on_cluster(workers: int, warm_course: Path, course: Path) -> dict:
    """The class graded on a LocalCluster of ``workers`` single-threaded workers, judges warm."""
    from distributed import Client, LocalCluster

    with LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0", env={"OMP_NUM_THREADS": "1"}
    ) as cluster:  # single-threaded workers, alike at 1 and 2
        with Client(cluster, set_as_default=False) as client:
            warm_seconds, warm_cpu = autograde(warm_course, "--scheduler", cluster.scheduler_address)
            before = _tree_cpu_seconds(client)
            seconds, cpu = autograde(course, "--scheduler", cluster.scheduler_address)
            workers_cpu = _tree_cpu_seconds(client) - before
    return {
        "seconds": seconds,
        "instructor_cpu_s": cpu,
        "workers_cpu_s": workers_cpu,
        "warm_up_seconds": warm_seconds,
        "warm_up_instructor_cpu_s": warm_cpu,
    }


def run(submissions: int) -> dict:
    students = roster(submissions, hangs=False)
    assignments = sorted({s.assignment for s in students})
    with tempfile.TemporaryDirectory(prefix="bertlab-cluster-bench-") as tmp:
        source = write_course(Path(tmp) / "source", set(assignments))
        for name in assignments:  # the grade cells into the gradebook; not timed
            subprocess.run(
                [sys.executable, "-m", "nbgrader", "generate_assignment", name, "--force"],
                cwd=source,
                check=True,
                capture_output=True,
                env={**os.environ, "HF_HUB_OFFLINE": "1"},
            )

        def copy(name: str, who) -> Path:
            course = Path(shutil.copytree(source, Path(tmp) / name))
            write_class(course, who)
            return course

        one = [s for s in students if s.member.name == "complete"][:1]
        load_before = os.getloadavg()[0]
        runs = {
            "1 worker": on_cluster(1, copy("warm-1", one), copy("cluster-1", students)),
            "2 workers": on_cluster(2, copy("warm-2", one), copy("cluster-2", students)),
        }
        jobs2_seconds, _ = autograde(copy("jobs-2", students), "--jobs", "2")
    report = summarize(submissions, runs, jobs2_seconds)
    report["cluster_grading"] = {
        "what": "a class graded on a Dask LocalCluster of single-threaded workers, judges warm, and with --jobs 2",
        "submissions": submissions,
        "assignments": assignments,
        "runs": runs,
        "jobs2_seconds": jobs2_seconds,
        "machine": {**machine(), "load_average_1min_before": load_before},
    }
    return report


def summarize(submissions: int, runs: dict[str, dict], jobs2_seconds: float) -> dict:
    """The figures of ``runs`` (way -> what ``on_cluster`` measured) and of ``--jobs 2``'s seconds."""
    per_worker_minute = {way: submissions / (int(way.split()[0]) * r["seconds"] / 60) for way, r in runs.items()}
    efficiency = per_worker_minute["2 workers"] / per_worker_minute["1 worker"]
    worker_s = runs["1 worker"]["seconds"] / submissions  # one worker's wall seconds per submission
    serial_s = max(
        0.0, (runs["1 worker"]["instructor_cpu_s"] - runs["1 worker"]["warm_up_instructor_cpu_s"]) / (submissions - 1)
    )
    report = {
        "cluster_per_worker_efficiency": efficiency,
        "cluster_vs_jobs2": runs["2 workers"]["seconds"] / jobs2_seconds,
        "cluster_core_s_per_submission": runs["1 worker"]["workers_cpu_s"] / submissions,
        "cluster_serial_s_per_submission": serial_s,
    }
    for workers in PROJECTED_WORKERS:
        # Workers beyond the first at the measured efficiency; the gradebook's writes never overlap.
        spread = PROJECTED_CLASS * worker_s / (workers * (efficiency if workers > 1 else 1.0))
        report[f"cluster_{PROJECTED_CLASS}_on_{workers}_workers_h"] = max(spread, PROJECTED_CLASS * serial_s) / 3600
    return report


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=40, help="class size (default 40)")
    parser.add_argument("--out", type=Path, default=HERE / "results.json", help="results file, merged into")
    args = parser.parse_args(argv)
    report = run(args.submissions)
    merge(args.out, report)  # other benchmarks' keys stay
    print(", ".join(f"{key} {value:.3g}" for key, value in report.items() if not isinstance(value, dict)))
    print(f"written to {args.out}")
    return args.out


if __name__ == "__main__":
    main()
