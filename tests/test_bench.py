"""Smoke run of the benchmarks: they run and write their figures (no timing is asserted)."""

import json

from bench import attention_projections


def test_attention_projection_benchmark_writes_ratios(tmp_path):
    out = attention_projections.main(["--rounds", "2", "--out", str(tmp_path / "r.json")])
    report = json.loads(out.read_text())
    assert len(report["shapes"]) == len(attention_projections.SHAPES)
    for shape in report["shapes"]:
        ratios = shape["ratio_to_one_matrix_per_role"]
        assert ratios[attention_projections.BASELINE] == 1.0
        assert set(ratios) == {"per head", "one matrix per role", "fused QKV"}
        assert all(v > 0 for v in shape["median_seconds"].values())
