"""The cluster benchmark's figures, from runs given (no grading): the per-worker efficiency, the
serial part and the projection follow from the seconds measured, as its docstring says."""

import math

from bench import cluster_grading


def test_cluster_figures_follow_from_the_runs():
    runs = {
        "1 worker": {
            "seconds": 120.0,
            "instructor_cpu_s": 11.25,
            "workers_cpu_s": 200.0,
            "warm_up_seconds": 10.0,
            "warm_up_instructor_cpu_s": 1.5,
        },
        "2 workers": {
            "seconds": 75.0,
            "instructor_cpu_s": 11.25,
            "workers_cpu_s": 210.0,
            "warm_up_seconds": 10.0,
            "warm_up_instructor_cpu_s": 1.5,
        },
    }
    report = cluster_grading.summarize(40, runs, jobs2_seconds=60.0)
    assert math.isclose(report["cluster_per_worker_efficiency"], (40 / (2 * 75 / 60)) / (40 / (120 / 60)))  # 0.8
    assert math.isclose(report["cluster_vs_jobs2"], 75 / 60)
    assert math.isclose(report["cluster_core_s_per_submission"], 200 / 40)
    serial = (11.25 - 1.5) / 39
    assert math.isclose(report["cluster_serial_s_per_submission"], serial)
    # 5,000 submissions at 3 s each: 1 worker 4.17 h; 10 at 0.8 efficiency 0.52 h; 100 would take
    # 0.052 h, but the gradebook's writes (0.25 s each, one at a time) take 0.35 h.
    assert math.isclose(report["cluster_5000_on_1_workers_h"], 5000 * 3 / 3600)
    assert math.isclose(report["cluster_5000_on_10_workers_h"], 5000 * 3 / (10 * 0.8) / 3600)
    assert math.isclose(report["cluster_5000_on_100_workers_h"], 5000 * serial / 3600)
