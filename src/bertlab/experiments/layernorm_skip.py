"""What the Add & Norm LayerNorms do in the trained model: run it with some of them skipped.

Each ``BertLayer`` has two: ``attention.output.LayerNorm`` (after the attention add, kind
``"attention"``) and ``output.LayerNorm`` (after the feed-forward add, kind ``"output"``).
``skipped`` makes chosen ones pass their input through unchanged (the identity), or, with
``affine=False``, normalise without their learned gain ``gamma`` and bias ``beta``. The embeddings'
own LayerNorm is never touched.

Measured: the size of the stream (mean L2 norm of the real tokens of each hidden state) and the
cosine of each sentence embedding (mean-pooled, L2-normalised) to the intact model's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from bertlab.pooling import sentence_embeddings

KINDS = ("attention", "output")


def layer_norm(layer, kind: str):
    """The ``LayerNorm`` of ``kind`` in ``layer``: ``attention.output.LayerNorm`` or ``output.LayerNorm``."""
    if kind == "attention":
        return layer.attention.output.LayerNorm
    if kind == "output":
        return layer.output.LayerNorm
    raise ValueError(f"unknown kind {kind!r}; choose one of {KINDS}")


def _identity(module, args, output):
    return args[0]


def _no_affine(module, args, output):
    return F.layer_norm(args[0], module.normalized_shape, eps=module.eps)


@contextlib.contextmanager
def skipped(model, which: Iterable[tuple[int, str]], affine: bool | None = None):
    """Within the block, the LayerNorms ``which`` (pairs ``(layer, kind)``) are changed.

    Forward hooks replace each chosen LayerNorm's output: by its input (identity) when
    ``affine`` is ``None``, or, when ``affine`` is ``False``, by the normalised input without
    ``gamma`` and ``beta``. The hooks are removed on exit, even after an error, so a cached model
    is left as it was found.
    """
    if affine not in (None, False):
        raise ValueError("affine is None (skip the LayerNorm) or False (drop gamma and beta only)")
    hook = _identity if affine is None else _no_affine
    layers = model.encoder.layer
    handles = []
    try:
        for i, kind in which:
            if not 0 <= i < len(layers):
                raise ValueError(f"layer {i} does not exist; the model has layers 0..{len(layers) - 1}")
            handles.append(layer_norm(layers[i], kind).register_forward_hook(hook))
        yield model
    finally:
        for handle in handles:
            handle.remove()


def all_of(model, kinds: Iterable[str] = KINDS) -> list[tuple[int, str]]:
    """Every ``(layer, kind)`` pair for the given kinds."""
    return [(i, kind) for kind in kinds for i in range(len(model.encoder.layer))]


def stream_norms(hidden_states: tuple[torch.Tensor, ...], attention_mask: torch.Tensor) -> torch.Tensor:
    """(L + 1,) mean over real tokens of the L2 norm of each hidden state's token vectors."""
    real = attention_mask.bool()  # (B, T)
    return torch.stack([h.norm(dim=-1)[real].mean() for h in hidden_states])


@dataclass(frozen=True)
class Run:
    """One pass of the model with some LayerNorms changed.

    Attributes:
        name: what was changed.
        norms: (L + 1,) ``stream_norms`` of the embeddings output and each layer's output.
        cosine: (B,) cosine of each sentence embedding to the intact model's.
    """

    name: str
    norms: torch.Tensor
    cosine: torch.Tensor

    @property
    def mean_cosine(self) -> float:
        return self.cosine.mean().item()


@torch.no_grad()
def measure(
    model,
    batch: Mapping[str, torch.Tensor],
    which: Iterable[tuple[int, str]],
    name: str,
    affine: bool | None = None,
    intact: torch.Tensor | None = None,
) -> Run:
    """Run ``model`` on ``batch`` with ``which`` changed (see ``skipped``); compare to intact.

    Args:
        intact: (B, H) the intact sentence embeddings, computed here if not given.
    """
    mask = batch["attention_mask"]  # (B, T)
    if intact is None:
        intact = sentence_embeddings(model(**batch).last_hidden_state, mask)
    with skipped(model, list(which), affine):
        out = model(**batch, output_hidden_states=True)
    emb = sentence_embeddings(out.last_hidden_state, mask)  # (B, H)
    return Run(name, stream_norms(out.hidden_states, mask), (emb * intact).sum(-1))


@torch.no_grad()
def scenarios(model, batch: Mapping[str, torch.Tensor]) -> dict[str, Run]:
    """The lesson's table: intact; each single LayerNorm skipped; all of a kind; all; no gamma/beta.

    Keys: ``"intact"``, ``"layer i attention"`` and ``"layer i output"`` for every layer,
    ``"all attention"``, ``"all output"``, ``"all"``, and ``"all, without gamma and beta"``
    (every Add & Norm LayerNorm still normalises but its learned affine is dropped).
    """
    intact = sentence_embeddings(model(**batch).last_hidden_state, batch["attention_mask"])  # (B, H)
    runs = {"intact": measure(model, batch, [], "intact", intact=intact)}
    for i in range(len(model.encoder.layer)):
        for kind in KINDS:
            name = f"layer {i} {kind}"
            runs[name] = measure(model, batch, [(i, kind)], name, intact=intact)
    for kind in KINDS:
        runs[f"all {kind}"] = measure(model, batch, all_of(model, [kind]), f"all {kind}", intact=intact)
    runs["all"] = measure(model, batch, all_of(model), "all", intact=intact)
    name = "all, without gamma and beta"
    runs[name] = measure(model, batch, all_of(model), name, affine=False, intact=intact)
    return runs


def affine_stats(model) -> dict[tuple[int, str], dict[str, float]]:
    """Range of the learned ``gamma`` (``weight``) and ``beta`` (``bias``) of every Add & Norm LayerNorm.

    Returns:
        ``{(layer, kind): {"gamma_min", "gamma_median", "gamma_max", "beta_min", "beta_max",
        "beta_abs_mean"}}``.
    """
    out = {}
    for i, kind in all_of(model):
        ln = layer_norm(model.encoder.layer[i], kind)
        g, b = ln.weight.detach(), ln.bias.detach()
        out[i, kind] = {
            "gamma_min": g.min().item(),
            "gamma_median": g.median().item(),
            "gamma_max": g.max().item(),
            "beta_min": b.min().item(),
            "beta_max": b.max().item(),
            "beta_abs_mean": b.abs().mean().item(),
        }
    return out


@torch.no_grad()
def pre_norm_stats(model, batch: Mapping[str, torch.Tensor]) -> dict[tuple[int, str], dict[str, float]]:
    """What each Add & Norm LayerNorm receives in the intact model, over real tokens.

    Returns:
        ``{(layer, kind): {"mean_abs_mean": mean over tokens of |mean of the token's features|,
        "std_mean": mean over tokens of the token's feature standard deviation}}``: how far the
        sum ``x + F(x)`` is from the centred, unit-variance vectors LayerNorm hands on.
    """
    seen: dict[tuple[int, str], torch.Tensor] = {}
    handles = []

    def record(key):
        def hook(module, args, output):
            seen[key] = args[0].detach()

        return hook

    for i, kind in all_of(model):
        handles.append(layer_norm(model.encoder.layer[i], kind).register_forward_hook(record((i, kind))))
    try:
        model(**batch)
    finally:
        for handle in handles:
            handle.remove()
    real = batch["attention_mask"].bool()  # (B, T)
    out = {}
    for key, states in seen.items():
        z = states[real]  # (N, H)
        out[key] = {
            "mean_abs_mean": z.mean(-1).abs().mean().item(),
            "std_mean": z.std(-1, unbiased=False).mean().item(),
        }
    return out
