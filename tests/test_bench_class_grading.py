"""Smoke run of the class benchmark on 1 submission and 2 rounds: it runs, times the three ways in
the same run (the two bertlab ways in pairs, in alternating order), and writes ratios computed from
those timings, merged into the results file. One submission (one assignment, so one nbgrader run):
the bookkeeping is the same for any class, and each further assignment costs a cold nbgrader run
and a gradebook of its own; ``make bench`` times a real class."""

import json
import math
import statistics

import pytest
from bench import class_grading

pytestmark = pytest.mark.slow


def test_class_benchmark_writes_ratios_from_its_own_timings(tmp_path, monkeypatch):
    measured = []  # every command timed in this run, in order

    def spy(args, cwd):
        seconds = real_timed(args, cwd)
        measured.append((args[2], args[3], seconds))
        return seconds

    real_timed = class_grading.timed
    monkeypatch.setattr(class_grading, "timed", spy)
    out = tmp_path / "results.json"
    out.write_text(json.dumps({"grade_one_vs_floor": 1.5}))  # another benchmark's figure

    assert class_grading.main(["--submissions", "1", "--rounds", "2", "--out", str(out)]) == out
    report = json.loads(out.read_text())

    assert report["grade_one_vs_floor"] == 1.5  # merged, not clobbered
    grading = report["class_grading"]
    assert grading["submissions"] == 1 and grading["same_scores"] is True and grading["grade_cells"] > 0
    seconds = grading["seconds"]
    assert set(seconds) == set(class_grading.WAYS)
    # The file's runs are the timed commands of this run, each pair's order alternating
    # (nbgrader: its runs, one per assignment, summed).
    runs = grading["runs"]
    jobs2, jobs1 = runs["bertlab autograde --jobs 2"], runs["bertlab autograde --jobs 1"]
    bertlab_runs = [s for tool, step, s in measured if tool == "bertlab.cli"]
    assert bertlab_runs == [jobs2[0], jobs1[0], jobs1[1], jobs2[1]]
    nbgrader_runs = [s for tool, step, s in measured if tool == "nbgrader" and step == "autograde"]
    assert len(nbgrader_runs) == len(grading["assignments"]) and math.isclose(
        sum(nbgrader_runs), seconds["nbgrader autograde"]
    )
    assert seconds["bertlab autograde --jobs 2"] == statistics.median(jobs2)
    assert report["class_speedup"] == statistics.median([jobs1[0] / jobs2[0], jobs1[1] / jobs2[1]])
    assert report["speedup_vs_nbgrader"] == seconds["nbgrader autograde"] / statistics.median(jobs2)
    assert all(math.isfinite(s) and s > 0 for s in seconds.values())
    assert {"platform", "cpus", "load_average_1min"} <= set(grading["machine"])
