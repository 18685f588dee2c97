"""bertlab.experiments.special_attention: attention and what it writes, by kind of key token."""

import pytest
import torch

from bertlab.experiments.cls_attention import KINDS
from bertlab.experiments.special_attention import layer_shares, value_lengths


@pytest.fixture(scope="module")
def output(model, batch):
    with torch.no_grad():
        return model(**batch, output_attentions=True, output_hidden_states=True)


@pytest.fixture(scope="module")
def shares(model, batch, output, tokenizer):
    return layer_shares(
        model, output.hidden_states, output.attentions, batch["input_ids"], batch["attention_mask"], tokenizer
    )


def test_value_lengths_are_each_heads_vector_through_its_rows_of_wo(model, output):
    layer, x = model.encoder.layer[1], output.hidden_states[1]
    lengths = value_lengths(layer, x)  # (B, A, T)
    sa = layer.attention.self
    d = sa.attention_head_size
    with torch.no_grad():
        v = sa.value(x).double()  # (B, T, H)
    w_o = layer.attention.output.dense.weight.double()  # (H, H)
    head = 3
    by_hand = (v[..., head * d : (head + 1) * d] @ w_o[:, head * d : (head + 1) * d].T).norm(dim=-1)  # (B, T)
    torch.testing.assert_close(lengths[:, head], by_hand)


def test_shares_sum_to_one_per_layer(shares, model):
    assert len(shares) == model.config.num_hidden_layers
    for s in shares:
        for field in (s.weight, s.uniform, s.written):
            assert set(field) == set(KINDS)
            assert sum(field.values()) == pytest.approx(1, abs=1e-6)


def test_written_shares_follow_weight_when_every_vector_is_as_long(model, batch, output, tokenizer, monkeypatch):
    """With every key's vector of one length, the written share is the weight share: the
    measure weighs the attention by the vector's length, nothing else; with [CLS]'s vectors
    made ten times as long, [CLS] writes more than its weight."""
    from bertlab.experiments import special_attention

    B, T = batch["input_ids"].shape
    A = model.config.num_attention_heads
    monkeypatch.setattr(special_attention, "value_lengths", lambda layer, x: torch.ones(B, A, T, dtype=torch.float64))
    args = (model, output.hidden_states, output.attentions, batch["input_ids"], batch["attention_mask"], tokenizer)
    for s in special_attention.layer_shares(*args):
        for kind in KINDS:
            assert s.written[kind] == pytest.approx(s.weight[kind], abs=1e-9)
    longer = torch.ones(B, A, T, dtype=torch.float64)
    longer[:, :, 0] = 10  # position 0 is [CLS]
    monkeypatch.setattr(special_attention, "value_lengths", lambda layer, x: longer)
    for s in special_attention.layer_shares(*args):
        assert s.written["[CLS]"] > s.weight["[CLS]"]


def test_the_model_parks_on_cls_and_cls_writes_little(shares):
    """What lesson 3 says of the model: computed from the model here, not read off the page."""
    for s in shares:
        assert s.weight["[CLS]"] > 2 * s.uniform["[CLS]"]
        assert s.weight["punctuation"] < s.uniform["punctuation"]
    for s in shares[1:]:
        assert s.weight["[SEP]"] < s.uniform["[SEP]"]
        assert s.written["[CLS]"] < s.weight["[CLS]"] / 3
        assert s.written["content"] > s.weight["content"]
