"""The attention sub-layer: self-attention, its output projection, and the first Add & Norm."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bertlab.bert.config import BertConfig
from bertlab.bert.self_attention import BertSelfAttention


class BertSelfOutput(nn.Module):
    """LayerNorm(input_tensor + dropout(dense(hidden_states))): mix the heads, add the residual, normalise."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        """hidden_states: self-attention's output (B, T, H); input_tensor: the sub-layer's input (B, T, H)."""
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)
        return self.LayerNorm(hidden_states + input_tensor)  # (B, T, H)


class BertAttention(nn.Module):
    """BertSelfAttention (``self``), then BertSelfOutput (``output``) on its result and the input."""

    def __init__(
        self,
        config: BertConfig,
        is_causal: bool = False,
        layer_idx: int | None = None,
        is_cross_attention: bool = False,
    ) -> None:
        super().__init__()
        if is_cross_attention:
            raise NotImplementedError("is_cross_attention=True is not supported: the course's BERT is an encoder")
        self.is_cross_attention = is_cross_attention
        self.self = BertSelfAttention(config, is_causal=is_causal, layer_idx=layer_idx)
        self.output = BertSelfOutput(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Any = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Attend, then project, add the residual and normalise.

        Args:
            hidden_states: the layer's input (B, T, H).
            attention_mask: additive, (B, 1, T, T) or (B, 1, 1, T), or None.
            encoder_hidden_states, encoder_attention_mask: a decoder's cross-attention inputs; passed
                along and unused, as transformers' self-attention leaves them.
            past_key_values: a decoder's cache; not supported.

        Returns:
            attention_output (B, T, H) and attn_weights (B, heads, T, T).
        """
        attention_output, attn_weights = self.self(
            hidden_states,
            encoder_hidden_states=encoder_hidden_states,
            attention_mask=attention_mask,
            past_key_values=past_key_values,
            **kwargs,
        )
        attention_output = self.output(attention_output, hidden_states)
        return attention_output, attn_weights
