"""Rank collapse: how far the token vectors of a sentence are from being all the same.

Dong, Cordonnier & Loukas (2021, "Attention is not all you need: pure attention loses rank doubly
exponentially with depth", ICML) measure, for a sentence's token matrix X (T, H), the residual

    res(X) = X - 1 x^T,   x = the token mean of X,

i.e. what is left after removing the best rank-1 approximation whose rows are all equal (for the
Frobenius norm the best such x is the mean). They report ``||res(X)|| / ||X||`` per layer for
four variants of a transformer: attention only, attention + skip connections, attention + MLP,
and the full model. Without skip connections the ratio goes to zero very fast: every token ends
up with the same vector.

Here X holds only a sentence's real tokens: padding is excluded from the mean and from both
norms. The variants are built by ``bertlab.experiments.lesions`` from the pretrained
sub-modules (see its docstring for how LayerNorm is treated): each kept block keeps its
LayerNorm, a removed feed-forward block is the identity, a removed skip gives ``LayerNorm(branch)``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from types import MappingProxyType

import torch

from bertlab.experiments.lesions import LayerEdit, run

#: The four variants of Dong et al. (2021), as the edit applied to every layer.
VARIANTS: Mapping[str, LayerEdit] = MappingProxyType(
    {
        "full": LayerEdit(),
        "attention_only": LayerEdit(attention_skip=False, ffn=False),
        "attention_skip": LayerEdit(ffn=False),
        "attention_ffn": LayerEdit(attention_skip=False, ffn_skip=False),
    }
)

#: Readable names for plots and tables.
LABELS: Mapping[str, str] = MappingProxyType(
    {
        "full": "full model",
        "attention_only": "attention only",
        "attention_skip": "attention + skip",
        "attention_ffn": "attention + FFN",
    }
)

NORMS = ("fro", "l1,inf")


def _matrix_norm(x: torch.Tensor, norm: str) -> torch.Tensor:
    """Norm of each (T, H) matrix in a (B, T, H) batch: (B,)."""
    if norm == "fro":
        return x.flatten(1).norm(dim=-1)
    if norm == "l1,inf":
        # Dong et al.'s composite norm sqrt(||X||_1 ||X||_inf): max column sum times max row sum.
        col = x.abs().sum(1).amax(-1)  # (B,): max over features of the sum over tokens
        row = x.abs().sum(2).amax(-1)  # (B,): max over tokens of the sum over features
        return (col * row).sqrt()
    raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")


def relative_residual(hidden: torch.Tensor, attention_mask: torch.Tensor, norm: str = "fro") -> torch.Tensor:
    """``||X - 1 x^T|| / ||X||`` for each sentence, over its real tokens only.

    Args:
        hidden: (B, T, H) token vectors.
        attention_mask: (B, T), 1 for real tokens and 0 for padding.
        norm: ``"fro"`` (Frobenius, default) or ``"l1,inf"`` (Dong et al.'s composite norm).

    Returns:
        (B,) ratios in [0, 1] for the Frobenius norm; 0 means every real token has the same vector.
    """
    weights = attention_mask[..., None].to(hidden.dtype)  # (B, T, 1)
    mean = (hidden * weights).sum(1, keepdim=True) / weights.sum(1, keepdim=True)  # (B, 1, H)
    residual = (hidden - mean) * weights  # (B, T, H); padded rows are zero and add nothing
    return _matrix_norm(residual, norm) / _matrix_norm(hidden * weights, norm)


@torch.no_grad()
def residuals(
    model, batch: Mapping[str, torch.Tensor], variant: str | LayerEdit = "full", norm: str = "fro"
) -> torch.Tensor:
    """Relative residual of every hidden state under one variant.

    Args:
        model: a ``BertModel`` in eval mode (pretrained or ``random_model``).
        batch: ``input_ids``, ``attention_mask`` and optionally ``token_type_ids``, (B, T).
        variant: a key of ``VARIANTS`` or a ``LayerEdit`` applied to every layer.
        norm: see ``relative_residual``.

    Returns:
        (L + 1, B): row 0 is the embeddings output, row ``i`` the output of layer ``i - 1``.
    """
    edit = VARIANTS[variant] if isinstance(variant, str) else variant
    trace = run(model, batch, edit)
    return torch.stack([relative_residual(h, trace.attention_mask, norm) for h in trace.hidden_states])


def curves(model, batch: Mapping[str, torch.Tensor], norm: str = "fro") -> dict[str, torch.Tensor]:
    """The mean over sentences of ``residuals`` for each of the four ``VARIANTS``.

    Returns:
        ``{variant name: (L + 1,)}``.
    """
    return {name: residuals(model, batch, name, norm).mean(1) for name in VARIANTS}


def _model_class(config) -> type:
    """The BertModel of ``config``'s side: the course's own for its config (the checks', which draw
    the same weights as transformers' under the same seed), else transformers'. Imported here:
    Task 7's checks import this module in a judge, which never imports transformers."""
    if type(config).__module__.startswith("bertlab.bert."):
        from bertlab.bert import BertModel as CourseBertModel

        return CourseBertModel
    from transformers import BertModel

    return BertModel


def random_model(config, seed: int = 0):
    """A ``BertModel`` with ``config`` and freshly initialised weights, in eval mode.

    Weights are drawn the way Hugging Face initialises BERT (normal with std
    ``initializer_range``, LayerNorm gain 1 and bias 0) from a private generator state seeded
    with ``seed``, so the global random state is left as it was and the same seed gives the same
    weights.

    Args:
        config: a ``BertConfig``; copied, not modified.
        seed: the seed.

    Returns:
        The model, eval mode, eager attention.
    """
    config = copy.deepcopy(config)
    model_class = _model_class(config)
    config._attn_implementation = "eager"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config)
    return model.eval()
