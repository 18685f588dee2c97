"""Token types in use: a sentence pair ``[CLS] A [SEP] B [SEP]`` and what its types change.

Given two texts, the tokenizer builds one input with ``token_type_ids`` 0 up to and including the
first ``[SEP]`` (segment A) and 1 after it (segment B). ``type_variants`` gives the types a
caller might pass instead, and ``pair_outputs`` runs the model with each; ``pooled`` and
``embedding_change`` compare the pair's sentence vectors (the model's mean pooling, in float64),
``token_change`` the token vectors.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: The token types tried on a pair, by name.
VARIANTS = ("as the tokenizer gives them", "all 0", "swapped")


def segment_b_start(encoding) -> int:
    """The position of B's first token: the first token of type 1."""
    types = encoding["token_type_ids"][0]
    if not bool((types == 1).any()):
        raise ValueError("the encoding has no segment B (no token of type 1)")
    return int((types == 1).nonzero()[0].item())


def type_variants(token_type_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """The tokenizer's types, all 0 (every token in A), and A and B swapped; keys ``VARIANTS``."""
    given = token_type_ids
    return dict(zip(VARIANTS, (given, torch.zeros_like(given), 1 - given), strict=True))


def pair_outputs(model, encoding) -> dict[str, torch.Tensor]:
    """The last hidden state (1, T, H) of the pair under each of ``type_variants``.

    One forward pass: the variants are the rows of one batch (same length, so no padding).
    """
    variants = type_variants(encoding["token_type_ids"])
    n = len(variants)
    with torch.no_grad():
        hidden = model(
            input_ids=encoding["input_ids"].expand(n, -1),
            attention_mask=encoding["attention_mask"].expand(n, -1),
            token_type_ids=torch.cat(list(variants.values())),
        ).last_hidden_state  # (n, T, H)
    return {name: hidden[i : i + 1] for i, name in enumerate(variants)}


def pooled(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean over real tokens, L2-normalised, in float64: (B, T, H) -> (B, H)."""
    weights = attention_mask[..., None].double()
    return F.normalize((hidden.double() * weights).sum(1) / weights.sum(1), dim=-1)


def embedding_change(a: torch.Tensor, b: torch.Tensor) -> float:
    """``1 - cos`` of two unit sentence vectors (H,) or (1, H), in float64."""
    return 1.0 - (a.double().reshape(-1) @ b.double().reshape(-1)).item()


def token_change(new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """Per token, ``|new - old| / |old|`` over the H features: (1, T, H) -> (T,), float64."""
    return (new.double() - old.double())[0].norm(dim=-1) / old.double()[0].norm(dim=-1)
