"""The feed-forward sub-layer: widen each token, apply the activation, project back, Add & Norm."""

from __future__ import annotations

import torch
from torch import nn

from bertlab.bert.activations import ACT2FN
from bertlab.bert.config import BertConfig


class BertIntermediate(nn.Module):
    """act(dense(hidden_states)): H -> intermediate_size, token by token."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        # A name from the config ("gelu") or, as transformers allows, a callable given in its place.
        self.intermediate_act_fn = (
            ACT2FN[config.hidden_act] if isinstance(config.hidden_act, str) else config.hidden_act
        )

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """(B, T, H) -> (B, T, intermediate_size)."""
        hidden_states = self.dense(hidden_states)
        return self.intermediate_act_fn(hidden_states)


class BertOutput(nn.Module):
    """LayerNorm(input_tensor + dropout(dense(hidden_states))): back to H, the second Add & Norm."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        """hidden_states: BertIntermediate's output (B, T, I); input_tensor: the sub-layer's input (B, T, H)."""
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)
        return self.LayerNorm(hidden_states + input_tensor)  # (B, T, H)
