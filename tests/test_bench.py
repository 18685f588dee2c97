"""Smoke run of the benchmarks: they run, time every variant in the same run and write their figures.

No speed is asserted (the machine decides it); what is asserted is that every figure in the file
comes from timings taken in this run, and that the ratios are those timings divided by the
baseline's.
"""

import json
import math

import pytest
import torch
from bench import attention_projections

from bertlab import reference
from tests.conftest import ROOT
from tests.docs_hooks import load_hook


def test_attention_projection_benchmark_writes_ratios(tmp_path, monkeypatch):
    measured = []  # what median_times returned, in call order: the timings of this run

    def spy(functions, *args, **kwargs):
        seconds = real_median_times(functions, *args, **kwargs)
        measured.append((tuple(args[0].shape), dict(seconds), kwargs.get("rounds")))
        return seconds

    real_median_times = attention_projections.median_times
    monkeypatch.setattr(attention_projections, "median_times", spy)

    out = attention_projections.main(["--rounds", "2", "--out", str(tmp_path / "r.json")])
    assert out == tmp_path / "r.json"
    report = json.loads(out.read_text())

    assert set(report) == {"what", "torch", "threads", "machine", "rounds", "shapes"}
    assert report["rounds"] == 2 and report["torch"] == torch.__version__
    # One timing run per shape, each with the rounds asked for, in the order of SHAPES.
    assert len(measured) == len(attention_projections.SHAPES) == len(report["shapes"])
    hidden = reference.load_config().hidden_size
    for (batch, tokens), shape, (x_shape, seconds, rounds) in zip(
        attention_projections.SHAPES, report["shapes"], measured, strict=True
    ):
        assert x_shape == (batch, tokens, hidden) and rounds == 2
        assert (shape["batch"], shape["tokens"]) == (batch, tokens)
        assert set(shape) == {"batch", "tokens", "median_seconds", "ratio_to_one_matrix_per_role"}

        variants = {"per head", "one matrix per role", "fused QKV"}
        timings, ratios = shape["median_seconds"], shape["ratio_to_one_matrix_per_role"]
        assert set(timings) == set(ratios) == variants
        assert attention_projections.BASELINE in timings
        # The file holds exactly the timings measured in this run (JSON round-trips floats exactly).
        assert timings == seconds
        assert all(math.isfinite(t) and t > 0 for t in timings.values()), timings
        baseline = timings[attention_projections.BASELINE]
        for name in variants:
            # Each ratio is its own timing over the baseline's, both from the same run.
            assert ratios[name] == timings[name] / baseline, name
            assert math.isfinite(ratios[name]) and ratios[name] > 0, name


@pytest.mark.slow
def test_feedback_benchmark_smoke(tmp_path, monkeypatch):
    """Every figure of bench/feedback.py is measured in the run, and each ratio divides two of them."""
    from bench import feedback, results

    built = []  # the docs builds asked for: (command, directory) — not run here, a cold build takes minutes

    def fake_build(args, cwd=feedback.ROOT, ok=(0,)):
        built.append((args, cwd))
        assert (cwd / "mkdocs.yml").is_file() and not (cwd / ".cache").exists()  # a fresh clone
        return 1.0

    real = feedback.seconds_of
    monkeypatch.setattr(
        feedback,
        "seconds_of",
        lambda args, cwd=feedback.ROOT, ok=(0,): fake_build(args, cwd) if "mkdocs" in args else real(args, cwd, ok),
    )
    out = feedback.main(
        [
            "--rounds",
            "1",
            "--only",
            "grade_one_vs_floor",
            "watch_latency_s",
            "check_latency_s",
            "docs_build_cold_s",
            "warm_judges_memory_mb",
            "--out",
            str(tmp_path / "results.json"),
        ]
    )
    report = json.loads(out.read_text())
    assert report["grade_one_vs_floor"] == report["grade_one_s"] / report["floor_s"]
    assert report["grade_one_cold_vs_floor"] == report["grade_one_cold_s"] / report["floor_s"]
    for key in (
        "floor_s",
        "transformers_floor_s",
        "reference_import_s",
        "grade_one_s",
        "grade_one_cold_s",
        "watch_latency_s",
        "check_latency_s",
    ):
        assert math.isfinite(report[key]) and report[key] > 0, key
    # Judges, their templates and the factory: more than one model's worth, less than a copy each.
    assert 100 < report["warm_judges_memory_mb"] < 4000, report["warm_judges_memory_mb"]
    assert report["reference_import_vs_floor"] == report["reference_import_s"] / report["floor_s"]
    assert report["transformers_floor_vs_floor"] == report["transformers_floor_s"] / report["floor_s"]
    assert [a[-4:-2] for a, _ in built] == [["build", "--strict"]] * 2  # one cold and one warm build
    assert report["goals"]["watch_latency_s"] == {"kind": "max", "bound": results.GOALS["watch_latency_s"][1]}
    assert report["feedback_machine"]["rounds"] == 1


def test_feedback_benchmark_measures_each_grading_path_in_the_same_run(tmp_path, monkeypatch):
    """The portable figures are the Linux path's gradings run again with the path's environment,
    and each ratio divides two figures of this run (the gradings themselves are faked here: the
    smoke test above runs the real ones)."""
    import contextlib

    from bench import feedback

    seen = []

    def fake_grade(rounds, *tasks, cold=False):
        path = (feedback.ENV.get("BERTLAB_PORTABLE"), feedback.ENV.get("BERTLAB_START_METHOD"))
        seen.append((path, tasks, cold))
        return 1.0 + len(seen)  # a different figure for every call

    monkeypatch.setattr(feedback, "grade", fake_grade)
    monkeypatch.setattr(feedback, "warm_judges", contextlib.nullcontext)
    monkeypatch.setattr(feedback, "floor", lambda rounds, code=None: 1.0)
    monkeypatch.setattr(feedback, "reference_import", lambda rounds: 1.5)
    monkeypatch.delenv("BERTLAB_PORTABLE", raising=False)
    feedback.ENV.pop("BERTLAB_PORTABLE", None)
    report = feedback.run(1, {"portable_grade_one_vs_linux"}, start=False)
    assert [path for path, _, _ in seen] == [(None, None)] * 4 + [("1", None)] * 4 + [("1", "forkserver")] * 4
    for prefix in ("portable", "forkserver"):
        for key in feedback.GRADINGS:
            assert report[f"{prefix}_{key}_vs_linux"] == report[f"{prefix}_{key}_s"] / report[f"{key}_s"]
    assert "BERTLAB_PORTABLE" not in feedback.ENV and "BERTLAB_START_METHOD" not in feedback.ENV


def test_every_ratio_shown_is_the_quotient_of_the_figures_beside_it(tmp_path):
    """A ratio of the results file equals its two figures' quotient; a run that replaces one of
    them drops the ratio it can no longer stand beside (the page then says it is not measured)."""
    from bench import results

    stored = json.loads((ROOT / "bench" / "results.json").read_text())
    assert not results.stale_ratios(stored), results.stale_ratios(stored)
    assert any(results.parts(key) for key in stored), "no ratio in the results: this test checks nothing"
    out = tmp_path / "results.json"
    out.write_text(json.dumps({"floor_s": 2.0, "reference_import_s": 4.0, "reference_import_vs_floor": 2.0}))
    results.merge(out, {"floor_s": 2.5})  # a later run measured the floor alone
    assert "reference_import_vs_floor" not in json.loads(out.read_text())


def _performance_hook():
    return load_hook("performance")


def _measured_cells(page_table: str) -> dict[str, str]:
    """The Performance table's "Measured" column, by key."""
    cells = {}
    for row in page_table.splitlines():
        columns = [c.strip() for c in row.strip("|").split("|")]
        if len(columns) >= 3 and columns[0].startswith("`"):
            cells[columns[0].strip("`")] = columns[2]
    return cells


def test_the_performance_page_shows_a_ratio_as_the_quotient_of_its_figures_as_shown():
    """The page computes a ratio from the two figures printed beside it: a reader who divides
    them gets the ratio shown, and a ratio missing or stale in the file is neither "not
    measured yet" nor another number while both its figures are on the page."""
    from bench import results

    hook = _performance_hook()
    assert all(hook.parts(key) == results.parts(key) for key in hook.KEYS)
    ratios = [key for key in hook.KEYS if hook.parts(key)]
    assert len(ratios) >= 10

    stored = json.loads((ROOT / "bench" / "results.json").read_text())
    cells = _measured_cells(hook.table(stored))
    for key in ratios:
        top, bottom = (cells[p] for p in hook.parts(key))
        if "not measured" in top or "not measured" in bottom:
            continue
        quotient = float(top.split()[0]) / float(bottom.split()[0])
        assert cells[key] == f"{quotient:.2f}x", (key, top, bottom, cells[key])

    # the case the page once showed: both figures measured, their ratio dropped or left stale
    for planted in ({}, {"reference_import_vs_floor": 2.17}):
        figures = {"floor_s": 2.2585, "reference_import_s": 4.2193, **planted}
        assert _measured_cells(hook.table(figures))["reference_import_vs_floor"] == "1.87x"
        assert hook.figures("{{ bench: reference_import_vs_floor }}", figures) == "1.87x"
    # a ratio with one figure missing is not made up
    assert _measured_cells(hook.table({"floor_s": 2.0}))["reference_import_vs_floor"] == "not measured yet"
