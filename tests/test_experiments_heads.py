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
    assert set(results) == {"per head", "one matrix per role", "fused QKV"}
    expected = results.pop("one matrix per role")
    assert len(expected) == 3  # q, k, v
    sa = attention.self
    for want, linear in zip(expected, (sa.query, sa.key, sa.value), strict=True):
        # the baseline itself against the module's own projections, split into heads by hand
        torch.testing.assert_close(want, linear(x).view(2, 5, 3, 8).transpose(1, 2))  # (B, heads, T, d)
    for name, qkv in results.items():
        # strict: a variant returning fewer (or more) than q, k, v fails instead of being cut short
        for got, want in zip(qkv, expected, strict=True):
            torch.testing.assert_close(got, want, msg=lambda m, name=name: f"{name}: {m}")


def test_median_times():
    times = median_times({"a": lambda t: t + 1, "b": lambda t: t * 2}, torch.ones(3), rounds=3, warmup=1)
    assert set(times) == {"a", "b"} and all(t > 0 for t in times.values())
