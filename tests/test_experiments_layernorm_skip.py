"""bertlab.experiments.layernorm_skip: LayerNorms skipped or without gamma/beta, and undone afterwards."""

import pytest
import torch
import torch.nn.functional as F

from bertlab.experiments import layernorm_skip, lesions


def _no_hooks(model):
    return all(
        not layernorm_skip.layer_norm(layer, kind)._forward_hooks
        for layer in model.encoder.layer
        for kind in layernorm_skip.KINDS
    )


def test_layer_norm_names(model):
    layer = model.encoder.layer[0]
    assert layernorm_skip.layer_norm(layer, "attention") is layer.attention.output.LayerNorm
    assert layernorm_skip.layer_norm(layer, "output") is layer.output.LayerNorm
    with pytest.raises(ValueError):
        layernorm_skip.layer_norm(layer, "embeddings")


def test_skipped_is_the_identity_then_undone(model, batch):
    trace = lesions.run(model, batch)
    with torch.no_grad(), layernorm_skip.skipped(model, [(1, "attention")]):
        ln = model.encoder.layer[1].attention.output.LayerNorm
        z = trace.hidden_states[1] + trace.attention_updates[1]  # (B, T, H)
        assert torch.equal(ln(z), z)
        # the edited pass equals the hand-composed one with that LayerNorm skipped
        x = trace.hidden_states[1]
        a = trace.attention_updates[1]
        h = x + a
        layer = model.encoder.layer[1]
        expected = layer.output.LayerNorm(h + layer.output.dense(layer.intermediate(h)))
        got = model(**batch, output_hidden_states=True).hidden_states[2]
    torch.testing.assert_close(got, expected)
    assert _no_hooks(model)
    with torch.no_grad():
        assert torch.equal(model(**batch).last_hidden_state, trace.last_hidden_state)


def test_without_affine_normalises_only(model, batch):
    trace = lesions.run(model, batch)
    z = trace.ffn_inputs[0] + trace.ffn_updates[0]  # (B, T, H)
    ln = model.encoder.layer[0].output.LayerNorm
    with torch.no_grad(), layernorm_skip.skipped(model, [(0, "output")], affine=False):
        torch.testing.assert_close(ln(z), F.layer_norm(z, ln.normalized_shape, eps=ln.eps))
    assert _no_hooks(model)
    with pytest.raises(ValueError):
        with layernorm_skip.skipped(model, [(0, "output")], affine=True):
            pass


def test_bad_layer_raises_and_leaves_no_hooks(model):
    with pytest.raises(ValueError):
        with layernorm_skip.skipped(model, [(0, "attention"), (99, "output")]):
            pass
    assert _no_hooks(model)


def test_stream_norms_by_hand():
    h = torch.tensor([[[3.0, 4.0], [0.0, 1.0], [9.0, 9.0]]])  # (1, 3, 2); the last token is padding
    mask = torch.tensor([[1, 1, 0]])
    norms = layernorm_skip.stream_norms((h, 2 * h), mask)
    torch.testing.assert_close(norms, torch.tensor([3.0, 6.0]))


def test_scenarios_table(model, batch):
    runs = layernorm_skip.scenarios(model, batch)
    L = model.config.num_hidden_layers
    assert len(runs) == 1 + 2 * L + 4
    torch.testing.assert_close(runs["intact"].cosine, torch.ones(batch["input_ids"].shape[0]))
    assert all(r.norms.shape == (L + 1,) for r in runs.values())
    assert runs["all"].mean_cosine < 0.99
    # "without gamma and beta": every normalised token has norm sqrt(H) (up to eps)
    H = model.config.hidden_size
    torch.testing.assert_close(
        runs["all, without gamma and beta"].norms[1:], torch.full((L,), H**0.5), rtol=1e-3, atol=0
    )
    assert _no_hooks(model)


def test_affine_and_input_statistics(model, batch):
    affine = layernorm_skip.affine_stats(model)
    ln = model.encoder.layer[2].output.LayerNorm
    assert affine[2, "output"]["gamma_max"] == ln.weight.max().item()
    assert affine[2, "output"]["beta_min"] == ln.bias.min().item()
    arriving = layernorm_skip.pre_norm_stats(model, batch)
    trace = lesions.run(model, batch)
    z = (trace.hidden_states[3] + trace.attention_updates[3])[batch["attention_mask"].bool()]  # (N, H)
    assert arriving[3, "attention"]["std_mean"] == pytest.approx(z.std(-1, unbiased=False).mean().item(), rel=1e-5)
    assert set(arriving) == set(affine)
    assert _no_hooks(model)
