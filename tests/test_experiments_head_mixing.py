"""bertlab.experiments.head_mixing: where W_O writes each head, and the model with W_O replaced."""

import pytest
import torch

from bertlab.capture import capture
from bertlab.experiments import head_mixing

LAYER = 2


@pytest.fixture(scope="module")
def pretrained(model):
    attention = model.encoder.layer[LAYER].attention
    cap = capture()
    context = cap.layer(LAYER, "attention.self").output[0][cap.batch["attention_mask"].bool()]  # (N, H)
    return attention, attention.self.num_attention_heads, context


def test_own_slot_shares_of_maps_that_keep_or_leave_the_slots():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(24, 24, generator=g)
    kept = head_mixing.diagonal_blocks(w, 3)
    torch.testing.assert_close(head_mixing.own_slot_shares(kept, 3), torch.ones(3, dtype=torch.float64))
    moved = torch.roll(kept, shifts=8, dims=0)  # every head written one slot further down
    torch.testing.assert_close(head_mixing.own_slot_shares(moved, 3), torch.zeros(3, dtype=torch.float64))


def test_own_slot_shares_of_the_pretrained_w_o(pretrained):
    attention, heads, _ = pretrained
    w = attention.output.dense.weight.double()
    d = w.shape[1] // heads
    for i in (0, heads - 1):
        block = w[:, i * d : (i + 1) * d]
        expected = block[i * d : (i + 1) * d].pow(2).sum() / block.pow(2).sum()
        assert head_mixing.own_slot_shares(w, heads)[i].item() == pytest.approx(expected.item())


def test_head_terms_add_up_to_w_o_and_coordinate_shares_to_one(pretrained):
    attention, heads, context = pretrained
    w = attention.output.dense.weight
    terms = head_mixing.head_terms(context, w, heads)  # (A, N, H)
    torch.testing.assert_close(terms.sum(0), context.double() @ w.double().T)
    shares = head_mixing.coordinate_shares(context, w, heads)  # (A, H)
    torch.testing.assert_close(shares.sum(0), torch.ones(shares.shape[1], dtype=torch.float64))
    own = head_mixing.coordinate_shares(context, head_mixing.diagonal_blocks(w, heads), heads)
    d = w.shape[1] // heads
    torch.testing.assert_close(own.argmax(0), torch.arange(w.shape[0]) // d)  # each feature: its own head only
    torch.testing.assert_close(own.max(0).values, torch.ones(w.shape[0], dtype=torch.float64))


def test_own_slot_fit_recovers_a_map_that_keeps_the_slots():
    g = torch.Generator().manual_seed(1)
    context = torch.randn(200, 24, generator=g, dtype=torch.float64)
    w = head_mixing.diagonal_blocks(torch.randn(24, 24, generator=g, dtype=torch.float64), 3)
    fit_w, fit_b = head_mixing.own_slot_fit(context, w, 3)
    torch.testing.assert_close(fit_w, w)
    torch.testing.assert_close(fit_b, torch.zeros(24, dtype=torch.float64), atol=1e-10, rtol=0)


def test_own_slot_fit_does_at_least_as_well_as_the_diagonal_blocks(pretrained):
    """The diagonal blocks (bias 0) are one of the maps the fit chooses from: its error is no larger."""
    attention, heads, context = pretrained
    w = attention.output.dense.weight
    target = context.double() @ w.double().T
    fit_w, fit_b = head_mixing.own_slot_fit(context, w, heads)
    fit_error = (context.double() @ fit_w.T + fit_b - target).pow(2).sum()
    diagonal_error = (context.double() @ head_mixing.diagonal_blocks(w, heads).double().T - target).pow(2).sum()
    assert fit_error <= diagonal_error
    d = w.shape[1] // heads
    assert torch.count_nonzero(fit_w[:d, d:]) == 0  # block-diagonal: slot 0 reads head 0 only


def test_run_with_output_projection(model, batch, pretrained):
    attention, _, _ = pretrained
    w, b = attention.output.dense.weight, attention.output.dense.bias
    before = {name: p.clone() for name, p in model.named_parameters()}
    with torch.no_grad():
        reference = model(**batch, output_hidden_states=True)
    same = head_mixing.run_with_output_projection(model, batch, LAYER, w, b)
    torch.testing.assert_close(same.last_hidden_state, reference.last_hidden_state, atol=0, rtol=0)

    removed = head_mixing.run_with_output_projection(model, batch, LAYER, torch.zeros_like(w), b)
    layer = model.encoder.layer[LAYER]
    with torch.no_grad():
        x = reference.hidden_states[LAYER]
        h = attention.output.LayerNorm(x + b)  # the update is W_O's bias alone
        y = layer.output(layer.intermediate(h), h)
    torch.testing.assert_close(removed.hidden_states[LAYER + 1], y)
    torch.testing.assert_close(removed.hidden_states[LAYER], reference.hidden_states[LAYER], atol=0, rtol=0)
    assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())


def test_relative_change_counts_real_tokens_only():
    old = torch.ones(1, 3, 4)
    new = old.clone()
    new[0, 0] *= 3  # moves by twice its length
    new[0, 2] += 100  # padding: not counted
    mask = torch.tensor([[1, 1, 0]])
    assert head_mixing.relative_change(new, old, mask) == pytest.approx(1.0)
