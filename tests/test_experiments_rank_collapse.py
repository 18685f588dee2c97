"""bertlab.experiments.rank_collapse: the residual measure, the four variants, random init."""

import math

import pytest
import torch

from bertlab import corpus
from bertlab.experiments import rank_collapse as rc


def test_relative_residual_by_hand():
    x = torch.tensor([[[1.0, 1.0], [1.0, -1.0]]])  # mean (1, 0); residual rows (0, 1), (0, -1)
    mask = torch.ones(1, 2)
    assert rc.relative_residual(x, mask).item() == pytest.approx(math.sqrt(2) / 2)
    # l1 of the residual 2 (column), l_inf 1 (row); of X: 2 and 2.
    assert rc.relative_residual(x, mask, norm="l1,inf").item() == pytest.approx(math.sqrt(2 * 1) / math.sqrt(2 * 2))


def test_identical_tokens_have_zero_residual_and_padding_is_ignored():
    row = torch.tensor([0.3, -1.2, 2.0])
    x = torch.stack([row, row, row, torch.tensor([9.0, 9.0, -9.0])])[None]  # (1, 4, 3); last is padding
    mask = torch.tensor([[1, 1, 1, 0]])
    assert rc.relative_residual(x, mask).item() == pytest.approx(0.0, abs=1e-7)
    x2 = x.clone()
    x2[0, 3] = torch.tensor([-5.0, 0.0, 1.0])
    assert torch.equal(rc.relative_residual(x, mask), rc.relative_residual(x2, mask))


def test_unknown_norm_is_refused():
    with pytest.raises(ValueError, match="norm"):
        rc.relative_residual(torch.ones(1, 2, 2), torch.ones(1, 2), norm="nuc")


def test_variants_are_the_four_of_dong_et_al():
    assert list(rc.VARIANTS) == ["full", "attention_only", "attention_skip", "attention_ffn"]
    assert set(rc.LABELS) == set(rc.VARIANTS)
    only = rc.VARIANTS["attention_only"]
    assert not only.attention_skip and not only.ffn and only.attention


def test_full_variant_measures_the_model_hidden_states(model, batch):
    with torch.no_grad():
        hidden = model(**batch, output_hidden_states=True).hidden_states
    expected = torch.stack([rc.relative_residual(h, batch["attention_mask"]) for h in hidden])
    got = rc.residuals(model, batch, "full")
    assert got.shape == (model.config.num_hidden_layers + 1, len(corpus.SENTENCES))
    assert torch.equal(got, expected)


def test_pure_attention_collapses_and_skips_prevent_it(model, batch):
    curves = rc.curves(model, batch)
    start = {name: c[0].item() for name, c in curves.items()}
    assert len(set(start.values())) == 1  # the embeddings are shared by every variant
    assert curves["attention_only"][-1] < 1e-3 < 0.5 < curves["full"][-1]
    assert curves["attention_ffn"][-1] < 1e-3 < 0.5 < curves["attention_skip"][-1]
    # Faster than exponential: each layer's ratio shrinks by more than the previous one did.
    c = curves["attention_only"]
    assert c[2] / c[1] > c[3] / c[2] > c[4] / c[3]


def test_random_model_is_seeded_and_leaves_the_global_rng_alone(model):
    state = torch.random.get_rng_state()
    a, b, c = rc.random_model(model.config, 0), rc.random_model(model.config, 0), rc.random_model(model.config, 1)
    assert torch.equal(torch.random.get_rng_state(), state)
    wa = a.encoder.layer[0].attention.self.query.weight
    assert torch.equal(wa, b.encoder.layer[0].attention.self.query.weight)
    assert not torch.equal(wa, c.encoder.layer[0].attention.self.query.weight)
    assert not a.training and a.config._attn_implementation == "eager"
    assert abs(wa.std().item() - model.config.initializer_range) < 2e-3
    assert model.config._attn_implementation == "eager"  # the reference config is untouched


def test_random_model_collapses_without_skips(model, batch):
    curves = rc.curves(rc.random_model(model.config, 0), batch)
    assert curves["attention_only"][1] < 0.1 and curves["attention_skip"][-1] > 0.5
