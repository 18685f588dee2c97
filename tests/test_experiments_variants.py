"""bertlab.experiments.variants: the post-LN arrangement is BertLayer, swaps are undone."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformers import BertConfig, BertModel

from bertlab.experiments.variants import (
    ARRANGEMENTS,
    drift,
    encode,
    layer_forward,
    nearest_neighbours,
    sentence_embeddings,
    swap_activation,
)
from bertlab.masks import additive_mask


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=40,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=16,
        attn_implementation="eager",
    )
    return BertModel(config, add_pooling_layer=False).eval()


@pytest.fixture(scope="module")
def batch():
    ids = torch.randint(1, 40, (3, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 7, dtype=torch.long)
    mask[1, 5:] = 0
    mask[2, 3:] = 0
    return {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": mask}


def test_post_ln_is_bert(tiny, batch):
    with torch.no_grad():
        expected = tiny(**batch).last_hidden_state
        x = tiny.embeddings(input_ids=batch["input_ids"])
        first = tiny.encoder.layer[0](x, additive_mask(batch["attention_mask"]))
    torch.testing.assert_close(encode(tiny, batch), expected)
    torch.testing.assert_close(layer_forward(tiny.encoder.layer[0], x, additive_mask(batch["attention_mask"])), first)


@pytest.mark.parametrize("arrangement", [a for a in ARRANGEMENTS if a != "post-LN"])
def test_other_arrangements_differ(tiny, batch, arrangement):
    out = encode(tiny, batch, arrangement)
    assert out.shape == (3, 7, 16)
    assert drift(encode(tiny, batch), out, batch["attention_mask"])["max_abs_diff"] > 1e-3


def test_drift_of_identical_is_zero(tiny, batch):
    h = encode(tiny, batch)
    d = drift(h, h.clone(), batch["attention_mask"])
    assert d["max_abs_diff"] == 0 and d["same_neighbour"] == 1
    assert d["sentence_cosine"] == pytest.approx(1, abs=1e-6)


def test_sentence_embeddings_ignore_padding():
    hidden = torch.randn(2, 4, 5)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    emb = sentence_embeddings(hidden, mask)
    torch.testing.assert_close(emb[0], F.normalize(hidden[0, :2].mean(0), dim=0))
    torch.testing.assert_close(emb.norm(dim=-1), torch.ones(2))
    assert nearest_neighbours(torch.eye(3)[[0, 1, 0]]).tolist() == [2, 0, 0]


def test_swap_activation_restores(tiny, batch):
    before = [layer.intermediate.intermediate_act_fn for layer in tiny.encoder.layer]
    reference = encode(tiny, batch)
    with swap_activation(tiny, torch.relu):
        changed = encode(tiny, batch)
    with swap_activation(tiny, nn.GELU()):
        same = encode(tiny, batch)
    assert [layer.intermediate.intermediate_act_fn for layer in tiny.encoder.layer] == before
    assert (changed - reference).abs().max() > 1e-4
    torch.testing.assert_close(same, reference)
    torch.testing.assert_close(encode(tiny, batch), reference)
