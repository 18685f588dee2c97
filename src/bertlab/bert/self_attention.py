"""Multi-head self-attention: every token reads a weighted mix of every (unmasked) token, per head."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bertlab.bert.config import BertConfig


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention over heads already split.

    Args:
        module: the calling module; only ``module.training`` is read (dropout or not).
        query, key, value: (B, heads, T, d).
        attention_mask: additive, broadcastable to (B, heads, T, T), or None.
        scaling: multiplies the scores; None means 1 / sqrt(d).
        dropout: the probability of dropping an attention weight (in training).
        **kwargs: whatever else the caller passes along (output_attentions=..., position_ids=...): unused.

    Returns:
        attn_output (B, T, heads, d) and attn_weights (B, heads, T, T), the probabilities after dropout.
    """
    if scaling is None:
        scaling = query.size(-1) ** -0.5

    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling  # (B, heads, T, T)
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask  # masked keys get the most negative float

    attn_weights = nn.functional.softmax(attn_weights, dim=-1)  # each query's weights sum to 1
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)

    attn_output = torch.matmul(attn_weights, value)  # (B, heads, T, d)
    attn_output = attn_output.transpose(1, 2).contiguous()  # (B, T, heads, d)
    return attn_output, attn_weights


class BertSelfAttention(nn.Module):
    """Project to queries, keys and values, attend in each head, and join the heads again."""

    def __init__(self, config: BertConfig, is_causal: bool = False, layer_idx: int | None = None) -> None:
        super().__init__()
        if config.hidden_size % config.num_attention_heads != 0 and not hasattr(config, "embedding_size"):
            raise ValueError(
                f"The hidden size ({config.hidden_size}) is not a multiple of the number of attention "
                f"heads ({config.num_attention_heads})"
            )
        self.config = config

        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = int(config.hidden_size / config.num_attention_heads)  # d
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.scaling = self.attention_head_size**-0.5

        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)

        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

        self.is_decoder = config.is_decoder
        # Kept for the same attributes as transformers: eager attention never reads it, the mask does the work.
        self.is_causal = is_causal
        self.layer_idx = layer_idx

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        past_key_values: Any = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Attend from every token to every token the mask lets it see.

        Args:
            hidden_states: (B, T, H).
            attention_mask: additive, (B, 1, T, T) or (B, 1, 1, T), or None.
            past_key_values: a decoder's key/value cache; not supported.
            **kwargs: passed on to eager_attention_forward, which ignores them.

        Returns:
            attn_output (B, T, H) and attn_weights (B, heads, T, T).
        """
        if past_key_values is not None:
            raise NotImplementedError(
                "past_key_values is not supported: the course's BERT is an encoder, with no cache"
            )
        input_shape = hidden_states.shape[:-1]  # (B, T)
        hidden_shape = (*input_shape, -1, self.attention_head_size)  # (B, T, heads, d)

        query_layer = self.query(hidden_states).view(*hidden_shape).transpose(1, 2)  # (B, heads, T, d)
        key_layer = self.key(hidden_states).view(*hidden_shape).transpose(1, 2)
        value_layer = self.value(hidden_states).view(*hidden_shape).transpose(1, 2)

        # Looked up when called, not bound at import: replacing this module's eager_attention_forward
        # (to watch or change it) takes effect, as replacing transformers' does there.
        attn_output, attn_weights = eager_attention_forward(
            self,
            query_layer,
            key_layer,
            value_layer,
            attention_mask,
            dropout=0.0 if not self.training else self.dropout.p,
            scaling=self.scaling,
            **kwargs,
        )
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()  # (B, T, H): heads side by side
        return attn_output, attn_weights
