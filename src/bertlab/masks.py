"""Attention masks the way transformers 5 hands them to an eager ``BertSelfAttention``."""

from __future__ import annotations

import torch


def additive_mask(attention_mask: torch.Tensor, dtype=torch.float32, per_query: bool = True) -> torch.Tensor:
    """Turn a (B, T) 0/1 padding mask into the additive mask added to attention scores.

    Kept keys get 0, padded keys the most negative float, so softmax gives them probability 0.
    A bool mask must never be added directly: True/False would be added as 1/0 (no error, wrong).

    Args:
        attention_mask: (B, T), 1 for real tokens and 0 for padding.
        per_query: return (B, 1, T, T) like transformers 5's eager path; else (B, 1, 1, T).

    Returns:
        (B, 1, T, T) or (B, 1, 1, T) float tensor of 0 and ``finfo(dtype).min``.
    """
    keep = attention_mask[:, None, None, :].to(dtype)  # (B, 1, 1, T)
    mask = (1.0 - keep) * torch.finfo(dtype).min
    if per_query:
        mask = mask.expand(-1, -1, attention_mask.shape[1], -1)  # (B, 1, T, T)
    return mask


def random_padding(batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """A (B, T) 0/1 mask with random lengths in [1, T]; the first sequence is never padded."""
    lengths = torch.randint(1, length + 1, (batch,), generator=generator)
    lengths[0] = length
    return (torch.arange(length)[None, :] < lengths[:, None]).long()
