"""Sentence embeddings the all-MiniLM-L6-v2 way: mean over real tokens, then L2 normalisation."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def sentence_embeddings(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of the token vectors over real tokens (padding excluded), L2-normalised.

    This is sentence-transformers' pooling for this model, so the result equals
    ``SentenceTransformer.encode`` when ``hidden`` is the model's last hidden state.

    Args:
        hidden: (B, T, H) token vectors.
        attention_mask: (B, T), 1 for real tokens and 0 for padding.

    Returns:
        (B, H) unit vectors.
    """
    weights = attention_mask[..., None].to(hidden.dtype)  # (B, T, 1)
    mean = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)  # (B, H)
    return F.normalize(mean, p=2, dim=-1)
