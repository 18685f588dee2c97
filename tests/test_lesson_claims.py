"""The claims the lessons' "why" sections make in prose, checked against freshly computed numbers.

Each test first finds the claim's sentence in the lesson (so rewording the prose brings the
reader here to check the claim still holds), then recomputes the experiment, with smaller
settings where the lesson's would be slow, and checks what the sentence says.
"""

from __future__ import annotations

import re

import pytest
import torch

from bertlab.experiments import ffn_width, layernorm_skip, stream_width
from tests.conftest import ROOT


def prose(lesson: str) -> str:
    """The lesson's comment text (markdown cells and code comments), whitespace collapsed, without
    the claims' check marks (``{{ claim: ... }}``: the build's own test of the same sentence)."""
    lines = (ROOT / "lessons" / lesson).read_text().splitlines()
    text = " ".join(line[1:].strip() for line in lines if line.startswith("#"))
    text = re.sub(r"\s*\{\{ claim: [^}]*\}\}", "", text)
    return re.sub(r"\s+", " ", text)


def says(lesson: str, *parts: str):
    """Each of ``parts``, pieces of one sentence, is in the lesson's prose."""
    for part in parts:
        assert part in prose(lesson), f"{lesson} no longer says {part!r}: re-check the claim and this test"


# --- lesson 5: why 4H and back to H --------------------------------------------------------

FFN = "05-feed-forward.py"


@pytest.fixture(scope="module")
def ks(model):
    I = model.config.intermediate_size
    return [I // 16, I // 4, I // 2, I]  # fewer k than the lesson, same range


@pytest.fixture(scope="module")
def errors(model, batch, ks):
    return ffn_width.truncation_errors(model, batch, ks)


@pytest.fixture(scope="module")
def cosines(model, batch, ks):
    return ffn_width.embedding_cosines(model, batch, ks)


def test_ffn_error_falls_with_k_and_vanishes_at_4h(errors):
    says(FFN, "The error falls as $k$ grows, for every choice", "and is 0 at $k = 4H$ (all units kept).")
    for s in ffn_width.STRATEGIES:
        curve = errors[s].mean(1)  # (len(ks),)
        assert bool((curve[1:] < curve[:-1]).all()), (s, curve)
        assert curve[-1] < 1e-5


def test_ffn_per_token_beats_fixed_beats_random(errors, cosines, ks):
    says(
        FFN,
        "each token's own top $k$ leaves a smaller error than the fixed subset",
        "and the fixed subset a smaller one than a random subset",
        "the sentence cosines come in the same order",
    )
    for row in range(len(ks) - 1):  # every k below 4H
        err = [errors[s][row].mean() for s in ("per-token", "fixed", "random")]
        cos = [cosines[s][row].mean() for s in ("per-token", "fixed", "random")]
        assert err[0] < err[1] < err[2], (ks[row], err)
        assert cos[0] > cos[1] > cos[2], (ks[row], cos)


def test_ffn_wider_hidden_layer_stores_more():
    says(
        FFN,
        "the FFN with $4H$ hidden units stores the table far better than the one with $H$",
        "and any hidden layer beats the linear map",
    )
    results = {r.name: r for r in ffn_width.train_lookup(hidden=16, pairs=256, steps=300, seeds=(0, 1))}  # the lesson's
    wide, narrow = results["H -> 4H -> H (GELU)"], results["H -> H -> H (GELU)"]
    linear, deep = results["linear H -> H"], results["4 x (H -> H -> H), residual"]
    assert wide.mean_loss < narrow.mean_loss / 2 < narrow.mean_loss < linear.mean_loss
    # "about as many parameters as the wide one", "end within 10% of the wide FFN's loss"
    assert abs(deep.parameters - wide.parameters) / wide.parameters < 0.05
    says(FFN, "end within 10% of the wide FFN's loss (", "apart, last line above)")
    assert abs(deep.mean_loss - wide.mean_loss) / wide.mean_loss < 0.1


def test_ffn_width_is_read_from_the_config(model):
    says(FFN, "our model keeps it too (read from its config below)")
    assert model.config.intermediate_size == 4 * model.config.hidden_size


# --- lesson 6: the trained model without its LayerNorms ------------------------------------

LN = "06-layernorm.py"


@pytest.fixture(scope="module")
def runs(model, batch):
    return layernorm_skip.scenarios(model, batch)


def test_ln_all_skipped_stream_grows_and_embeddings_lost(runs):
    says(
        LN,
        "With all of them skipped, the stream grows after every layer (left, log scale)",
        "the sentence embeddings end up almost unrelated to the intact ones, mean cosine",
    )
    skip_all = runs["all"]
    assert bool((skip_all.norms[1:] > skip_all.norms[:-1]).all())
    assert skip_all.mean_cosine < 0.1


def test_ln_output_side_hurts_more_in_every_layer(model, runs):
    says(
        LN,
        "In every layer, skipping the FFN-side `output.LayerNorm` hurts more than skipping the "
        "attention-side one (right).",
    )
    for i in range(model.config.num_hidden_layers):
        assert runs[f"layer {i} output"].mean_cosine < runs[f"layer {i} attention"].mean_cosine, i


def test_ln_normalising_without_gamma_beta_is_not_enough(runs):
    says(
        LN,
        "with $\\gamma$ and $\\beta$ dropped the stream has a constant size, yet the mean cosine,",
        "is lower than with every attention-side LayerNorm skipped",
    )
    norms = runs["all, without gamma and beta"].norms[1:]
    assert (norms.max() - norms.min()) / norms.mean() < 1e-3
    assert runs["all, without gamma and beta"].mean_cosine < runs["all attention"].mean_cosine


def test_ln_gains_below_one_inputs_centred_not_unit(model, batch):
    says(LN, "Every LayerNorm's median gain $\\gamma_k$ is below 1")
    says(LN, "What arrives at a LayerNorm has a per-token mean near 0 but a standard deviation of its own")
    affine = layernorm_skip.affine_stats(model)
    assert all(st["gamma_median"] < 1 for st in affine.values())
    arriving = layernorm_skip.pre_norm_stats(model, batch)
    assert all(a["mean_abs_mean"] < 0.1 * a["std_mean"] for a in arriving.values())
    stds = torch.tensor([a["std_mean"] for a in arriving.values()])
    assert (stds - 1).abs().max() > 0.2  # "of its own": not all 1


# --- lesson 8: why the stream keeps one width -----------------------------------------------

RES = "08-residual-connections.py"


@pytest.fixture(scope="module")
def widths():
    return stream_width.compare(width=32, depth=12, samples=512, seeds=(0, 1, 2))  # the lesson's settings


def test_width_identity_keeps_direction_projections_lose_it(widths):
    says(
        RES,
        "After twelve identity skips the output still points roughly where the input did (cosine "
        "printed); after twelve projections the cosine is near 0, orthogonal or not",
    )
    for norm in stream_width.NORMS:
        assert widths["identity", norm].cosine[-1] > 0.5
        for s in ("projection", "orthogonal"):
            assert abs(widths[s, norm].cosine[-1]) < 0.1, (s, norm)


def test_width_post_ln_r2(widths):
    says(
        RES,
        "the $R^2$ from the input falls faster with depth than with identities (left)",
        "while the orthogonal projections keep about as much as the identity.",
    )
    ident, proj, orth = (widths[s, "Post-LN"].r2 for s in ("identity", "projection", "orthogonal"))
    assert bool((proj[1:] < ident[1:]).all())
    assert abs(orth[-1] - ident[-1]) < 0.05


def test_width_plain_sum_gradient_fades_with_projections(widths):
    says(
        RES,
        "the gradient reaching the first block with default projections is smaller than with identities by a factor",
    )
    assert widths["projection", "none"].grad[0] < widths["identity", "none"].grad[0] / 10
    assert widths["projection", "none"].grad_ratio < widths["identity", "none"].grad_ratio


def test_width_every_hidden_state_has_width_h(model, batch):
    says(RES, "So BERT keeps one width $H$ for every hidden state and every sub-layer's output")
    with torch.no_grad():
        hidden = model(**batch, output_hidden_states=True).hidden_states
    assert {s.shape[-1] for s in hidden} == {model.config.hidden_size}
    for layer in model.encoder.layer:  # every sub-layer writes H features
        assert layer.attention.output.dense.out_features == layer.output.dense.out_features == model.config.hidden_size
