"""bertlab.experiments.heads: per-head blocks, OV circuits and the projection variants agree."""

import pytest
import torch
from transformers import BertConfig
from transformers.models.bert.modeling_bert import BertAttention

from bertlab.experiments.heads import head_rows, median_times, ov_circuits, projection_variants


@pytest.fixture(scope="module")
def attention():
    torch.manual_seed(0)
    config = BertConfig(hidden_size=24, num_attention_heads=3, intermediate_size=96)
    return BertAttention(config).eval()


def test_head_rows(attention):
    assert head_rows(attention.self, 2) == slice(16, 24)


def test_ov_circuits_rank_and_sum(attention):
    ov = ov_circuits(attention)  # (3, 24, 24)
    assert ov.shape == (3, 24, 24)
    assert int(torch.linalg.matrix_rank(ov).max()) <= attention.self.attention_head_size
    full = attention.self.value.weight.T @ attention.output.dense.weight.T
    torch.testing.assert_close(ov.sum(0), full)


def test_projection_variants_agree(attention):
    x = torch.randn(2, 5, 24)
    results = {name: fn(x) for name, fn in projection_variants(attention.self).items()}
    expected = results.pop("one matrix per role")
    assert expected[0].shape == (2, 3, 5, 8)
    for qkv in results.values():
        for got, want in zip(qkv, expected):
            torch.testing.assert_close(got, want)


def test_median_times():
    times = median_times({"a": lambda t: t + 1, "b": lambda t: t * 2}, torch.ones(3), rounds=3, warmup=1)
    assert set(times) == {"a", "b"} and all(t > 0 for t in times.values())
