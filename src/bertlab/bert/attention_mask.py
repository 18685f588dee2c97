"""From the tokenizer's 0/1 padding mask to the additive mask eager attention adds to its scores.

BertModel takes ``attention_mask`` as the tokenizer returns it, (B, T) with 1 for a token and 0 for
padding. Attention needs it as a bias on the scores (B, heads, T, T): 0 where a query may look, the
most negative float where it may not, so that softmax gives that key a weight of exactly 0.
This follows transformers' ``create_bidirectional_mask`` for eager attention without a cache.
"""

from __future__ import annotations

import torch


def bidirectional_mask(attention_mask: torch.Tensor | None, inputs_embeds: torch.Tensor) -> torch.Tensor | None:
    """The additive mask (B, 1, T, T) for ``attention_mask`` (B, T), or None when nothing is masked.

    Args:
        attention_mask: (B, T) with nonzero for tokens and 0 for padding; or a 4-D mask the caller
            prepared already, returned as it is; or None.
        inputs_embeds: the embeddings output (B, T, H); gives the query length, dtype and device.

    Returns:
        None when there is no mask or no padding (adding zeros would change nothing); else a float
        tensor (B, 1, T, T) of 0 and ``finfo(dtype).min``, the same for every query row.
    """
    if attention_mask is None:
        return None
    if attention_mask.dim() == 4:
        return attention_mask  # already a bias, as a caller may build for custom patterns
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be (B, T) or 4-D, got shape {tuple(attention_mask.shape)}")
    keep = attention_mask.to(device=inputs_embeds.device, dtype=torch.bool)  # (B, T_k): any nonzero attends
    if keep.all():
        return None  # no padding: skipping the add is what lets the result match an unmasked run exactly
    batch_size, query_length, dtype = inputs_embeds.shape[0], inputs_embeds.shape[1], inputs_embeds.dtype
    if keep.shape[0] != batch_size:
        raise ValueError(f"attention_mask has {keep.shape[0]} rows for a batch of {batch_size}")
    allowed = keep[:, None, None, :].expand(batch_size, 1, query_length, keep.shape[-1])  # (B, 1, T, T_k)
    # min, not -inf: a row whose every key is masked still gets finite weights from softmax, not NaN.
    zero = torch.zeros((), device=allowed.device, dtype=dtype)
    return torch.where(allowed, zero, torch.finfo(dtype).min)
