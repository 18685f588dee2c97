"""Run the pretrained encoder with one piece changed, and measure how far its outputs move.

Two kinds of change are supported:

- the arrangement of residual connection and LayerNorm around each sub-layer
  (`ARRANGEMENTS`, lesson 4), computed by
  [`encode`][bertlab.experiments.variants.encode] from the pretrained sub-modules;
- the FFN activation of every layer
  ([`swap_activation`][bertlab.experiments.variants.swap_activation], lesson 5).

[`drift`][bertlab.experiments.variants.drift] compares the result with the unchanged model on
the token and the sentence level.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from bertlab.masks import additive_mask
from bertlab.pooling import sentence_embeddings

# How a sub-layer's output `out` and its input `x` are combined.
ARRANGEMENTS = {
    "post-LN": "LayerNorm(x + out)  (BERT, Vaswani et al. 2017)",
    "pre-LN": "x + Sublayer(LayerNorm(x))  (Xiong et al. 2020)",
    "LayerNorm before the add": "x + LayerNorm(out)",
    "no residual": "LayerNorm(out)",
}


def _combine(layer_norm: nn.Module, out: torch.Tensor, x: torch.Tensor, arrangement: str) -> torch.Tensor:
    """Close a sub-layer: ``out`` is its output (B, T, H), ``x`` its input (B, T, H)."""
    if arrangement == "post-LN":
        return layer_norm(x + out)
    if arrangement == "LayerNorm before the add":
        return x + layer_norm(out)
    if arrangement == "no residual":
        return layer_norm(out)
    raise ValueError(f"unknown arrangement {arrangement!r}; choose one of {list(ARRANGEMENTS)}")


def layer_forward(layer: nn.Module, x: torch.Tensor, mask: torch.Tensor, arrangement: str = "post-LN") -> torch.Tensor:
    """One pretrained ``BertLayer`` (eval mode) with its Add & Norms arranged as ``arrangement``.

    Args:
        layer: a ``BertLayer``; its sub-modules and weights are used unchanged.
        x: hidden states (B, T, H).
        mask: additive attention mask, broadcastable to (B, heads, T, T).
        arrangement: a key of `ARRANGEMENTS`. For ``"pre-LN"`` the pretrained
            ``attention.output.LayerNorm`` and ``output.LayerNorm`` normalise each sub-layer's input.

    Returns:
        (B, T, H). With ``"post-LN"`` this equals ``layer(x, mask)``.
    """
    attn_self, attn_out = layer.attention.self, layer.attention.output
    if arrangement == "pre-LN":
        context, _ = attn_self(attn_out.LayerNorm(x), attention_mask=mask)  # (B, T, H)
        a = x + attn_out.dense(context)
        return a + layer.output.dense(layer.intermediate(layer.output.LayerNorm(a)))
    context, _ = attn_self(x, attention_mask=mask)  # (B, T, H)
    a = _combine(attn_out.LayerNorm, attn_out.dense(context), x, arrangement)  # first Add & Norm
    f = layer.output.dense(layer.intermediate(a))  # (B, T, H)
    return _combine(layer.output.LayerNorm, f, a, arrangement)  # second Add & Norm


@torch.no_grad()
def encode(model: nn.Module, batch, arrangement: str = "post-LN") -> torch.Tensor:
    """The last hidden state (B, T, H) of ``model`` on ``batch`` with every layer arranged alike.

    Args:
        model: a ``BertModel`` in eval mode.
        batch: ``input_ids``, ``token_type_ids`` and ``attention_mask``, each (B, T).
    """
    h = model.embeddings(input_ids=batch["input_ids"], token_type_ids=batch.get("token_type_ids"))
    mask = additive_mask(batch["attention_mask"])  # (B, 1, T, T)
    for layer in model.encoder.layer:
        h = layer_forward(layer, h, mask, arrangement)
    return h


def drift(reference: torch.Tensor, other: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, float]:
    """How far ``other`` (B, T, H) moved from ``reference`` (B, T, H), over real tokens only.

    Returns:
        ``max_abs_diff`` of the token vectors, mean ``token_cosine``, mean ``sentence_cosine`` of
        the sentence embeddings, and ``same_neighbour``: the fraction of sentences whose most
        similar other sentence is unchanged.
    """
    real = attention_mask.bool()  # (B, T)
    ref_s, oth_s = sentence_embeddings(reference, attention_mask), sentence_embeddings(other, attention_mask)
    return {
        "max_abs_diff": (reference - other)[real].abs().max().item(),
        "token_cosine": F.cosine_similarity(reference[real], other[real], dim=-1).mean().item(),
        "sentence_cosine": (ref_s * oth_s).sum(-1).mean().item(),
        "same_neighbour": (nearest_neighbours(ref_s) == nearest_neighbours(oth_s)).float().mean().item(),
    }


def nearest_neighbours(embeddings: torch.Tensor) -> torch.Tensor:
    """For each unit vector in (B, H), the index of the most similar *other* one: (B,)."""
    sim = embeddings @ embeddings.T  # (B, B)
    return sim.fill_diagonal_(-2.0).argmax(-1)


@contextlib.contextmanager
def swap_activation(model: nn.Module, activation: Callable[[torch.Tensor], torch.Tensor]):
    """Temporarily replace every layer's ``intermediate.intermediate_act_fn`` by ``activation``.

    The original functions are restored on exit, even after an error, so a cached model is
    left as it was found.
    """
    if not isinstance(activation, nn.Module):
        activation = _Function(activation)  # the slot holds a registered sub-module
    layers = [layer.intermediate for layer in model.encoder.layer]
    saved = [m.intermediate_act_fn for m in layers]
    try:
        for m in layers:
            m.intermediate_act_fn = activation
        yield model
    finally:
        for m, fn in zip(layers, saved, strict=True):
            m.intermediate_act_fn = fn


class _Function(nn.Module):
    """Wraps a plain function so it can sit where PyTorch expects a sub-module."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]):
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)
