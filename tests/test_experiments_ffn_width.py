"""bertlab.experiments.ffn_width: unit masks, truncated FFNs, hooks undone, the seeded training runs."""

import pytest
import torch

from bertlab.experiments import ffn_width
from bertlab.pooling import sentence_embeddings


@pytest.fixture(scope="module")
def acts(model, batch):
    return ffn_width.intact_activations(model, batch)


def test_keep_mask_counts_and_choices(acts):
    m, real = acts[0][0], acts[1]  # (B, T, I), (B, T)
    I = m.shape[-1]
    ranking = ffn_width.unit_ranking(m, real)
    assert sorted(ranking.tolist()) == list(range(I))
    assert m.abs()[real].mean(0)[ranking[0]] == m.abs()[real].mean(0).max()
    fixed = ffn_width.keep_mask(m, 10, "fixed", ranking)
    assert fixed.shape == (I,) and fixed.sum() == 10 and bool(fixed[ranking[:10]].all())
    per_token = ffn_width.keep_mask(m, 7, "per-token")
    assert per_token.shape == m.shape and bool((per_token.sum(-1) == 7).all())
    # every kept unit is at least as large as every dropped one, token by token
    kept_min = torch.where(per_token.bool(), m.abs(), torch.inf).amin(-1)
    dropped_max = torch.where(per_token.bool(), -torch.inf, m.abs()).amax(-1)
    assert bool((kept_min >= dropped_max).all())
    a = ffn_width.keep_mask(m, 5, "random", generator=torch.Generator().manual_seed(3))
    b = ffn_width.keep_mask(m, 5, "random", generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and a.sum() == 5
    with pytest.raises(ValueError):
        ffn_width.keep_mask(m, 0, "fixed", ranking)
    with pytest.raises(ValueError):
        ffn_width.keep_mask(m, 3, "largest")


def test_errors_vanish_with_every_unit_and_not_before(model, batch):
    I = model.config.intermediate_size
    errors = ffn_width.truncation_errors(model, batch, ks=(I // 8, I))
    for s in ffn_width.STRATEGIES:
        assert errors[s].shape == (2, model.config.num_hidden_layers)
        assert errors[s][1].abs().max() < 1e-5
        assert bool((errors[s][0] > 0.01).all())


def test_units_kept_hooks_change_the_model_and_are_removed(model, batch, acts):
    I = model.config.intermediate_size
    mask = batch["attention_mask"]
    with torch.no_grad():
        intact = model(**batch).last_hidden_state
        with ffn_width.units_kept(model, I, "fixed", ffn_width.subset_masks(*acts, I, "fixed")):
            everything = model(**batch).last_hidden_state
        with ffn_width.units_kept(model, 16, "per-token", ffn_width.subset_masks(*acts, 16, "per-token")):
            few = model(**batch).last_hidden_state
        after = model(**batch).last_hidden_state
    torch.testing.assert_close(everything, intact)
    assert (sentence_embeddings(few, mask) * sentence_embeddings(intact, mask)).sum(-1).mean() < 0.99
    assert torch.equal(after, intact)
    assert all(not layer.intermediate._forward_hooks for layer in model.encoder.layer)


def test_embedding_cosines_shape_and_full_width(model, batch):
    I = model.config.intermediate_size
    cos = ffn_width.embedding_cosines(model, batch, ks=(I // 4, I), strategies=("random",))
    assert set(cos) == {"random"} and cos["random"].shape == (2, batch["input_ids"].shape[0])
    torch.testing.assert_close(cos["random"][1], torch.ones_like(cos["random"][1]))
    assert cos["random"][0].mean() < 0.999


def test_lookup_models_parameter_counts():
    H = 8
    counts = {name: sum(p.numel() for p in net.parameters()) for name, net in ffn_width.lookup_models(H).items()}
    assert counts == {
        "linear H -> H": H * H + H,
        "H -> H -> H (GELU)": 2 * H * H + 2 * H,
        "H -> 4H -> H (GELU)": 8 * H * H + 5 * H,
        "4 x (H -> H -> H), residual": 4 * (2 * H * H + 2 * H),
    }


def test_train_lookup_is_deterministic_and_learns():
    state = torch.random.get_rng_state()
    threads = torch.get_num_threads()
    first = ffn_width.train_lookup(hidden=8, pairs=64, steps=40, seeds=(0,))
    second = ffn_width.train_lookup(hidden=8, pairs=64, steps=40, seeds=(0,))
    assert torch.equal(torch.random.get_rng_state(), state)  # the global RNG is left alone
    assert torch.get_num_threads() == threads
    assert [r.name for r in first] == list(ffn_width.lookup_models(8))
    for a, b in zip(first, second, strict=True):
        assert a.parameters == b.parameters and torch.equal(a.losses, b.losses)
        assert 0 < a.mean_loss < 1.2
    by_name = {r.name: r.mean_loss for r in first}
    assert by_name["H -> 4H -> H (GELU)"] < by_name["linear H -> H"]
