"""Backward runs in train mode too: an in-place write on a tensor autograd saved is named.

Dropout written in place on the softmax's output gives HF's values in eval mode and under
no_grad, but the softmax's backward needs its output as it was: in training, ``loss.backward()``
raises. An in-place dropout on a tensor nothing saved (a Linear's output) is right and passes.
The modules are written as a learner would, independently of ``bertlab.diagnose``.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

from bertlab.checks import CheckFailed, check
from tests.conftest import solution_namespace

BertSelfOutput: Any = solution_namespace("04-attention-output")["BertSelfOutput"]  # learner-style right code


class Attention(nn.Module):
    """A learner's BertSelfAttention; ``drop`` decides how its probabilities are dropped."""

    def __init__(self, config, is_causal=False, layer_idx=None):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def drop(self, probs):
        return self.dropout(probs)

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        B, T, H = hidden_states.shape
        n, d = self.num_attention_heads, self.attention_head_size
        q, k, v = (f(hidden_states).view(B, T, n, d).transpose(1, 2) for f in (self.query, self.key, self.value))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)  # (B, n, T, T)
        if attention_mask is not None:
            scores = scores + attention_mask
        probs = self.drop(torch.softmax(scores, dim=-1))
        return (probs @ v).transpose(1, 2).reshape(B, T, H), probs


class InPlaceModule(Attention):
    """Wrong: nn.Dropout(inplace=True) on the softmax's output."""

    def __init__(self, config, is_causal=False, layer_idx=None):
        super().__init__(config, is_causal, layer_idx)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob, inplace=True)


class InPlaceFunctional(Attention):
    """Wrong: the functional form, in place."""

    def drop(self, probs):
        return nn.functional.dropout(probs, self.dropout.p, self.training, inplace=True)


class InPlaceOnTheUpdate(BertSelfOutput):
    """Right: in place on the dense output, which no backward needs (a Linear saves its input)."""

    def forward(self, hidden_states, input_tensor):
        update = nn.functional.dropout(self.dense(hidden_states), self.dropout.p, self.training, inplace=True)
        return self.LayerNorm(update + input_tensor)


@pytest.mark.parametrize("cls", [InPlaceModule, InPlaceFunctional])
def test_dropout_in_place_on_the_softmax_output_is_named(cls):
    with pytest.raises(CheckFailed) as err:
        check("3.2", cls)
    message = str(err.value)
    assert "in train mode, backward raises" in message and "in place" in message, message


def eager_attention_in_place(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Wrong (Task 3.1): the weights dropped in place with ``torch.dropout_``'s method form."""
    scores = query @ key.transpose(-1, -2) * (query.shape[-1] ** -0.5 if scaling is None else scaling)
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = scores.softmax(-1)  # (B, heads, T, T)
    if module.training and dropout > 0:
        torch.dropout_(weights, dropout, True)
    return (weights @ value).transpose(1, 2), weights


def test_the_function_task_runs_backward_in_training_too():
    with pytest.raises(CheckFailed) as err:
        check("3.1", eager_attention_in_place)
    assert "in train mode, backward raises" in str(err.value), str(err.value)


def test_dropout_in_place_where_nothing_was_saved_passes(capsys):
    check("4.1", InPlaceOnTheUpdate)
    assert "[Task 4.1] BertSelfOutput passed" in capsys.readouterr().out


def test_right_attention_passes_in_train_mode_too(capsys):
    check("3.2", Attention)
    assert "[Task 3.2] BertSelfAttention passed" in capsys.readouterr().out


def test_train_mode_gradients_are_compared_with_hfs():
    """Straight-through dropout: HF's values in train mode, but its backward ignores the mask."""

    class StraightThrough(Attention):
        def drop(self, probs):
            return probs + (self.dropout(probs) - probs).detach()  # forward: dropped; backward: identity

    with pytest.raises(CheckFailed, match="in train mode, with HF's dropout masks") as err:
        check("3.2", StraightThrough, only="gradients")
    # Its train-mode values are HF's, measured even with the dropout check not run: the backward is named.
    assert "only the train-mode backward differs" in str(err.value), str(err.value)


def test_a_train_mode_gradient_failure_with_wrong_values_says_so():
    """Run alone, the gradients check has not seen the dropout check: it measures the train-mode
    values before saying they are right. Dropout with the wrong probability: eval mode is HF's,
    train mode is not, values and gradients alike."""

    class WrongProbability(Attention):
        def drop(self, probs):
            return nn.functional.dropout(probs, 0.5, self.training)

    with pytest.raises(CheckFailed, match="in train mode, with HF's dropout masks") as err:
        check("3.2", WrongProbability, only="gradients")
    message = str(err.value)
    assert "your values on these inputs differ from HF's too" in message, message
    assert "only the train-mode backward differs" not in message, message


def test_an_in_place_write_the_autograd_saved_raises_in_torch_itself():
    """The premise: torch refuses it (if it ever stops, the check above has nothing to name)."""
    probs = torch.softmax(torch.randn(4, 4, requires_grad=True), dim=-1)
    nn.functional.dropout(probs, 0.5, True, inplace=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        probs.sum().backward()
