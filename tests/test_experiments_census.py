"""bertlab.experiments.census: every BERT parameter is placed, and the counts add up."""

import pytest
import torch
from transformers import BertConfig, BertModel

from bertlab.experiments.census import GROUPS, PARTS, census, ffn_share, locate


@pytest.fixture(scope="module")
def tiny():
    config = BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=20,
    )
    with torch.device("meta"):
        return BertModel(config)


def test_locate_examples():
    where = locate("encoder.layer.11.intermediate.dense.weight")
    assert (where.layer, where.part, where.piece, where.group) == (11, "intermediate", "dense.weight", "feed-forward")
    assert locate("encoder.layer.0.attention.output.LayerNorm.bias").group == "attention"
    assert locate("embeddings.word_embeddings.weight").layer is None
    assert locate("pooler.dense.bias").part == "pooler"
    with pytest.raises(ValueError):
        locate("cls.predictions.bias")


def test_census_adds_up(tiny):
    total = sum(p.numel() for p in tiny.parameters())
    parts, groups = census(tiny), census(tiny, by="group")
    assert tuple(parts) == PARTS and tuple(groups) == GROUPS
    assert sum(parts.values()) == sum(groups.values()) == total


def test_per_layer_formula(tiny):
    h = tiny.config.hidden_size
    layer = census(tiny, by="group", layer=1)
    assert layer == {"embeddings": 0, "attention": 4 * h * h + 6 * h, "feed-forward": 8 * h * h + 7 * h, "pooler": 0}
    assert ffn_share(tiny) == pytest.approx((8 * h + 7) / (12 * h + 13))


def test_bert_base_numbers():
    with torch.device("meta"):
        base = BertModel(BertConfig())
    assert len(list(base.named_parameters())) == 199
    assert sum(census(base).values()) == 109_482_240
