"""Known mistakes in the measurements of Task 7 (rank collapse and lesions).

The right measurements live in ``bertlab.experiments.rank_collapse`` and
``bertlab.experiments.lesions``. Here the same pipeline is written out once more, small, with a
``flaw`` argument at each step, so that a mistake made in a small function (the relative
residual, one layer variant, the sentence cosine) is recognised again in the measurements built
from it (the curves of Task 7.3, the lesion table of Task 7.5), where the learner reuses it.
With ``flaw=None`` every function here equals the reference (the tests check it).

Inputs each task hands to ``Mistake.outputs(module, inputs)``:

- 7.1: ``module`` None; ``inputs`` ``hidden_states`` (B, T, H), ``attention_mask`` (B, T).
- 7.2: ``module`` a ``BertLayer``; ``inputs`` ``hidden_states``, ``attention_mask`` (additive),
  ``attention_skip``, ``ffn``, ``ffn_skip``.
- 7.3: ``module`` a ``BertModel``; ``inputs`` ``batch`` and ``measure="curves"``.
- 7.4: ``module`` None; ``inputs`` ``hidden_a``, ``hidden_b`` (B, T, H), ``attention_mask``.
- 7.5: ``module`` a ``BertModel``; ``inputs`` ``batch`` and ``measure="lesions"``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F

from bertlab.diagnose import Mistake, register
from bertlab.masks import additive_mask

RESIDUAL, VARIANT, CURVES, COSINE, LESIONS = "7.1", "7.2", "7.3", "7.4", "7.5"
RESIDUAL_LESSON, ACTIVATION_LESSON = "08-residual-connections", "09-no-activation"

#: Dong et al.'s four variants as keyword arguments of ``layer_variant``.
VARIANTS: Mapping[str, dict] = {
    "full": dict(attention_skip=True, ffn=True, ffn_skip=True),
    "attention_only": dict(attention_skip=False, ffn=False, ffn_skip=True),
    "attention_skip": dict(attention_skip=True, ffn=False, ffn_skip=True),
    "attention_ffn": dict(attention_skip=False, ffn=True, ffn_skip=False),
}

#: The single-layer lesions of Task 7.5, as keyword arguments of ``layer_variant``.
LESION_KINDS: Mapping[str, dict] = {
    "ffn": dict(attention_skip=True, ffn=False, ffn_skip=True),
    "attention_skip": dict(attention_skip=False, ffn=True, ffn_skip=True),
}


def relative_residual(hidden_states, attention_mask, flaw=None):
    """``||X - 1 x̄ᵀ||_F / ||X||_F`` per sentence over its real tokens: (B, T, H), (B, T) -> (B,)."""
    weights = attention_mask[..., None].to(hidden_states.dtype)  # (B, T, 1)
    if flaw == "residual-includes-padding":
        weights = torch.ones_like(weights)
    if flaw == "residual-mean-over-features":
        mean = hidden_states.mean(-1, keepdim=True)  # (B, T, 1): each token's own mean
    elif flaw == "residual-mean-includes-padding":
        mean = hidden_states.mean(1, keepdim=True)  # (B, 1, H): the padded rows averaged in
    else:
        mean = (hidden_states * weights).sum(1, keepdim=True) / weights.sum(1, keepdim=True)  # (B, 1, H)
    residual = ((hidden_states - mean) * weights).flatten(1)  # (B, T*H)
    whole = (
        hidden_states.flatten(1) if flaw == "residual-norm-includes-padding" else (hidden_states * weights).flatten(1)
    )
    if flaw == "residual-not-relative":
        return residual.norm(dim=-1)
    if flaw == "residual-squared-norms":
        return residual.pow(2).sum(-1) / whole.pow(2).sum(-1)
    return residual.norm(dim=-1) / whole.norm(dim=-1)


def layer_variant(layer, hidden_states, attention_mask, attention_skip=True, ffn=True, ffn_skip=True, flaw=None):
    """One pretrained ``BertLayer`` composed by hand with blocks or skips removed: (B, T, H) -> (B, T, H)."""
    attention = layer.attention
    context = attention.self(hidden_states, attention_mask=attention_mask)[0]  # (B, T, H)
    a = attention.output.dense(context)  # (B, T, H): the attention update
    if attention_skip or flaw == "variant-skip-kept":
        h = attention.output.LayerNorm(hidden_states + a)
    elif flaw == "skip-removed-layernorm-dropped":
        h = a
    else:
        h = attention.output.LayerNorm(a)
    if not ffn:
        return layer.output.LayerNorm(h) if flaw == "removed-ffn-keeps-layernorm" else h
    f = layer.output.dense(layer.intermediate(h))  # (B, T, I) -> (B, T, H)
    if ffn_skip or flaw == "variant-ffn-skip-kept":
        return layer.output.LayerNorm(h + f)
    if flaw == "skip-removed-layernorm-dropped":
        return f
    return layer.output.LayerNorm(f)


def _hidden_states(model, batch, edits: Mapping[int, dict], flaw=None, start=None) -> list[torch.Tensor]:
    """Embeddings, then every layer with ``edits[i]`` (default: intact): L + 1 tensors (B, T, H).

    ``start=(i, x)`` begins at layer ``i`` with stream ``x`` (an intact prefix reused); the
    returned list then holds ``x`` and the outputs of layers ``i`` to ``L - 1``.
    """
    mask = additive_mask(batch["attention_mask"])  # (B, 1, T, T)
    if start is None:
        first, x = 0, model.embeddings(input_ids=batch["input_ids"], token_type_ids=batch.get("token_type_ids"))
    else:
        first, x = start
    states = [x]
    for i, layer in enumerate(model.encoder.layer):
        if i >= first:
            x = layer_variant(layer, x, mask, **edits.get(i, VARIANTS["full"]), flaw=flaw)
            states.append(x)
    return states


def curves(model, batch, flaw=None) -> dict[str, torch.Tensor]:
    """Mean relative residual of every hidden state, per variant: ``{name: (L + 1,)}``."""
    L = len(model.encoder.layer)
    out = {}
    for name, kwargs in VARIANTS.items():
        states = _hidden_states(model, batch, dict.fromkeys(range(L), kwargs), flaw)
        out[name] = torch.stack([relative_residual(h, batch["attention_mask"], flaw).mean() for h in states])
    return out


def sentence_embeddings(hidden_states, attention_mask, flaw=None):
    """Mean over real tokens, L2-normalised (unless a flaw says otherwise): (B, T, H) -> (B, H)."""
    if flaw == "cls-pooling":
        pooled = hidden_states[:, 0]  # (B, H): the [CLS] token
    else:
        weights = attention_mask[..., None].to(hidden_states.dtype)  # (B, T, 1)
        if flaw == "pooling-includes-padding":
            weights = torch.ones_like(weights)
        pooled = (hidden_states * weights).sum(1) / weights.sum(1)  # (B, H)
    return pooled if flaw == "cosine-not-normalised" else F.normalize(pooled, dim=-1)


def sentence_cosine(hidden_a, hidden_b, attention_mask, flaw=None):
    """Cosine between the sentence embeddings of two passes over the same batch: (B,)."""
    return (
        sentence_embeddings(hidden_a, attention_mask, flaw) * sentence_embeddings(hidden_b, attention_mask, flaw)
    ).sum(-1)


def lesion_effects(model, batch, flaw=None) -> dict[str, torch.Tensor]:
    """Mean cosine to the intact sentence embeddings, one lesion per layer: ``{kind: (L,)}``."""
    L = len(model.encoder.layer)
    mask = batch["attention_mask"]
    intact = _hidden_states(model, batch, {}, flaw)  # L + 1 tensors (B, T, H)
    out = {}
    for kind, kwargs in LESION_KINDS.items():
        row = []
        for i in range(L):
            if flaw == "lesion-in-every-layer":
                lesioned = _hidden_states(model, batch, dict.fromkeys(range(L), kwargs), flaw)[-1]
            else:  # layers before i are intact: start from their output
                lesioned = _hidden_states(model, batch, {i: kwargs}, flaw, start=(i, intact[i]))[-1]
            row.append(sentence_cosine(lesioned, intact[-1], mask, flaw).mean())
        out[kind] = torch.stack(row)
    return out


def _simulate(flaw):
    def outputs(module, inputs):
        if "hidden_a" in inputs:
            return {"cosine": sentence_cosine(**inputs, flaw=flaw)}
        if inputs.get("measure") == "curves":
            return curves(module, inputs["batch"], flaw)
        if inputs.get("measure") == "lesions":
            return lesion_effects(module, inputs["batch"], flaw)
        if module is None:
            return {"residual": relative_residual(**inputs, flaw=flaw)}
        return {"layer_output": layer_variant(module, **inputs, flaw=flaw)}

    return outputs


# Sections of lesson 8 the feedback links to.
MEASURE = "The measure by hand"
FOUR = "Four variants, pretrained and at initialisation"
ALONE = "Attention alone averages tokens away"  # its table says where each variant keeps its LayerNorm
LESION_SECTION = "Lesions: remove one piece of the pretrained model"

for _id, _tasks, _description, _lesson, _section in [
    (
        "residual-includes-padding",
        (RESIDUAL, CURVES),
        "the residual computed over ALL T positions, padding included, in the token mean and in both norms",
        RESIDUAL_LESSON,
        MEASURE,
    ),
    (
        "residual-mean-includes-padding",
        (RESIDUAL, CURVES),
        "a mean token x̄ averaged over ALL T positions, padding included, while both norms keep to the real "
        "tokens: x̄ must be the mean of the real tokens only",
        RESIDUAL_LESSON,
        MEASURE,
    ),
    (
        "residual-norm-includes-padding",
        (RESIDUAL, CURVES),
        "a residual whose numerator leaves padding out but whose denominator ||X|| counts the padded rows too",
        RESIDUAL_LESSON,
        MEASURE,
    ),
    ("residual-not-relative", (RESIDUAL, CURVES), "||X - 1 x̄ᵀ||_F NOT divided by ||X||_F", RESIDUAL_LESSON, MEASURE),
    (
        "residual-mean-over-features",
        (RESIDUAL, CURVES),
        "X minus each token's mean over its H features, instead of minus the mean token x̄ (a mean over the tokens)",
        RESIDUAL_LESSON,
        MEASURE,
    ),
    (
        "residual-squared-norms",
        (RESIDUAL, CURVES),
        "the ratio of SQUARED norms, ||X - 1 x̄ᵀ||² / ||X||², without the square roots",
        RESIDUAL_LESSON,
        MEASURE,
    ),
    (
        "variant-skip-kept",
        (VARIANT, CURVES, LESIONS),
        "a layer that adds the skip connection around attention even when `attention_skip=False`",
        RESIDUAL_LESSON,
        FOUR,
    ),
    # Not a Task 7.5 mistake: no lesion removes the FFN skip, so the lesion table cannot show it.
    (
        "variant-ffn-skip-kept",
        (VARIANT, CURVES),
        "a layer that adds the skip connection around the feed-forward block even when `ffn_skip=False`",
        RESIDUAL_LESSON,
        FOUR,
    ),
    (
        "skip-removed-layernorm-dropped",
        (VARIANT, CURVES, LESIONS),
        "a layer that drops the LayerNorm along with a removed skip: the branch alone, a or f, "
        "instead of LayerNorm(a) or LayerNorm(f)",
        RESIDUAL_LESSON,
        ALONE,
    ),
    (
        "removed-ffn-keeps-layernorm",
        (VARIANT, CURVES, LESIONS),
        "a layer that still applies output.LayerNorm when the feed-forward block is removed (`ffn=False`): "
        "a removed block is the identity, LayerNorm included",
        RESIDUAL_LESSON,
        ALONE,
    ),
    (
        "cosine-not-normalised",
        (COSINE, LESIONS),
        "the dot product of the mean-pooled vectors WITHOUT L2 normalisation: that is not a cosine",
        RESIDUAL_LESSON,
        LESION_SECTION,
    ),
    (
        "pooling-includes-padding",
        (COSINE, LESIONS),
        "sentence embeddings averaged over all T positions, padding included, instead of over the real tokens",
        RESIDUAL_LESSON,
        LESION_SECTION,
    ),
    (
        "cls-pooling",
        (COSINE, LESIONS),
        "sentence embeddings taken from the first token ([CLS]) instead of the mean over the real tokens",
        RESIDUAL_LESSON,
        LESION_SECTION,
    ),
    (
        "lesion-in-every-layer",
        (LESIONS,),
        "the lesion applied to EVERY layer at once instead of to layer i alone",
        ACTIVATION_LESSON,
        "The experiment: put the ReLUs in",
    ),
]:
    register(Mistake(_id, _tasks, _description, _lesson, _section, _simulate(_id)))
