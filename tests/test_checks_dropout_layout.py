"""Dropout is judged by what HF's draws are, not by a tensor's layout.

HF keeps each element on its own with probability 1 - p. Right code that draws that dropout in
another memory layout (sequence-first, batch and heads merged) passes; code that draws one mask
and shares it over rows ("locked" or broadcast dropout) fails, in every module that drops. Each
module is written as a learner would, independently of ``bertlab.diagnose`` and of the course's
own solutions' code paths where the form differs.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

from bertlab.checks import CheckFailed, check
from tests.conftest import solution_namespace

# Learner-style right code to build on: the solution notebooks' classes.
BertEmbeddings: Any = solution_namespace("02-embeddings")["BertEmbeddings"]
BertSelfOutput: Any = solution_namespace("04-attention-output")["BertSelfOutput"]


class Heads(nn.Module):
    """Q, K, V projections with HF's names; subclasses attend in their own layout."""

    def __init__(self, config, is_causal=False, layer_idx=None):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def project(self, hidden_states):  # (B, T, H) -> three (T, B, heads, d)
        B, T, _ = hidden_states.shape
        n, d = self.num_attention_heads, self.attention_head_size
        return [f(hidden_states).view(B, T, n, d).transpose(0, 1) for f in (self.query, self.key, self.value)]


class SequenceFirst(Heads):
    """Right: attention weights as (T_q, T_k, B, heads), element-wise dropout on them."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        q, k, v = self.project(hidden_states)  # (T, B, n, d)
        scores = torch.einsum("ibnd,jbnd->ijbn", q, k) / math.sqrt(self.attention_head_size)  # (T, T, B, n)
        if attention_mask is not None:
            scores = scores + attention_mask.permute(2, 3, 0, 1)
        probs = self.dropout(scores.softmax(dim=1))  # keys on axis 1
        context = torch.einsum("ijbn,jbnd->ibnd", probs, v)  # (T, B, n, d)
        T, B = context.shape[:2]
        return context.transpose(0, 1).reshape(B, T, -1), probs.permute(2, 3, 0, 1)


class MergedHeads(Heads):
    """Right: batch and heads merged, (B * heads, T, T), dropout by the functional form."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        B, T, _ = hidden_states.shape
        n = self.num_attention_heads
        q, k, v = (x.permute(1, 2, 0, 3).reshape(B * n, T, -1) for x in self.project(hidden_states))
        scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(self.attention_head_size)  # (B * n, T, T)
        if attention_mask is not None:
            scores = (scores.view(B, n, T, T) + attention_mask).view(B * n, T, T)
        probs = nn.functional.dropout(scores.softmax(-1), self.dropout.p, self.training)
        context = torch.bmm(probs, v).view(B, n, T, -1).transpose(1, 2).reshape(B, T, -1)
        return context, probs.view(B, n, T, T)


class LockedOverSentencesAndHeads(SequenceFirst):
    """Wrong: one (T, T) mask drawn once and shared by every sentence and head."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        q, k, v = self.project(hidden_states)
        scores = torch.einsum("ibnd,jbnd->ijbn", q, k) / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            scores = scores + attention_mask.permute(2, 3, 0, 1)
        probs = scores.softmax(dim=1)  # (T, T, B, n)
        probs = probs * self.dropout(torch.ones_like(probs[..., :1, :1]))  # (T, T, 1, 1), broadcast
        context = torch.einsum("ijbn,jbnd->ibnd", probs, v)
        T, B = context.shape[:2]
        return context.transpose(0, 1).reshape(B, T, -1), probs.permute(2, 3, 0, 1)


class LockedOverPositions(BertSelfOutput):
    """Wrong: one mask per sentence over the features, shared by every position ("variational")."""

    def forward(self, hidden_states, input_tensor):
        update = self.dense(hidden_states)  # (B, T, H)
        keep = self.dropout(torch.ones_like(update[:, :1]))  # (B, 1, H)
        return self.LayerNorm(update * keep + input_tensor)


class LockedEmbeddings(BertEmbeddings):
    """Wrong: the embeddings' dropout mask drawn for one position and broadcast over the sequence."""

    def __init__(self, config):
        super().__init__(config)
        self.p = config.hidden_dropout_prob

    def forward(self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None, **kwargs):
        dropout, self.dropout = self.dropout, nn.Identity()
        try:
            out = super().forward(input_ids, token_type_ids, position_ids, inputs_embeds, **kwargs)  # (B, T, H)
        finally:
            self.dropout = dropout
        return out * nn.functional.dropout(torch.ones_like(out[:, :1]), self.p, self.training)


@pytest.mark.parametrize("cls", [SequenceFirst, MergedHeads])
def test_attention_in_another_layout_with_elementwise_dropout_passes(cls, capsys):
    check("3.2", cls)
    assert "[Task 3.2] BertSelfAttention passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("task", "cls"),
    [("3.2", LockedOverSentencesAndHeads), ("4.1", LockedOverPositions), ("2.1", LockedEmbeddings)],
)
def test_a_mask_shared_over_rows_fails_the_dropout_check(task, cls):
    with pytest.raises(CheckFailed) as err:
        check(task, cls)
    assert "in train mode" in str(err.value), str(err.value)
    assert err.value.mistake == "dropout-mask-shared", str(err.value)
    assert "HF applies" not in str(err.value)  # its dropout is at HF's place: no placement hint
