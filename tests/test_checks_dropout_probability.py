"""Dropout probabilities are checked by behaviour on a config where they differ from 0.1 and from
each other: a probability typed in, or read from the wrong field, fails although the pretrained
model (0.1 everywhere) cannot tell it from the right one.

Each wrong module is written as a learner would, from the solution notebooks' right pieces.
"""

from __future__ import annotations

from typing import Any

import pytest
from torch import nn

from bertlab.checks import CheckFailed, check
from tests.conftest import solution_namespace

NB02 = solution_namespace("02-embeddings")
NB03 = solution_namespace("03-self-attention")
NB04 = solution_namespace("04-attention-output")
NB05 = solution_namespace("05-feed-forward")
BertSelfOutput: Any = NB04["BertSelfOutput"]
BertOutput: Any = NB05["BertOutput"]
BertEmbeddings: Any = NB02["BertEmbeddings"]


class TypedProbabilitySelfOutput(BertSelfOutput):
    """Add & Norm whose dropout is written with the pretrained model's 0.1 typed in."""

    def forward(self, hidden_states, input_tensor):
        x = nn.functional.dropout(self.dense(hidden_states), 0.1, self.training)  # (B, T, H)
        return self.LayerNorm(x + input_tensor)


class WrongFieldOutput(BertOutput):
    """The FFN's dropout reads attention_probs_dropout_prob where HF reads hidden_dropout_prob."""

    def __init__(self, config):
        super().__init__(config)
        self.p = config.attention_probs_dropout_prob

    def forward(self, hidden_states, input_tensor):
        x = nn.functional.dropout(self.dense(hidden_states), self.p, self.training)
        return self.LayerNorm(x + input_tensor)


class WrongFieldEmbeddings(BertEmbeddings):
    """Embeddings whose dropout module is built from attention_probs_dropout_prob, and used as a
    function with that probability (the module's own p is not what runs)."""

    def __init__(self, config):
        super().__init__(config)
        self.p = config.attention_probs_dropout_prob

    def forward(self, *args, **kwargs):
        dropout, self.dropout = self.dropout, nn.Identity()
        try:
            embeddings = super().forward(*args, **kwargs)
        finally:
            self.dropout = dropout
        return nn.functional.dropout(embeddings, self.p, self.training)


def typed_probability_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """eager_attention_forward with the pretrained model's 0.1 typed in place of `dropout`."""
    scores = (query @ key.transpose(-1, -2)) * (scaling if scaling is not None else query.shape[-1] ** -0.5)
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = nn.functional.dropout(scores.softmax(-1), p=0.1 if dropout else 0.0, training=module.training)
    return (weights @ value).transpose(1, 2).contiguous(), weights


@pytest.mark.parametrize(
    "task, obj",
    [
        ("4.1", TypedProbabilitySelfOutput),
        ("5.2", WrongFieldOutput),
        ("2.1", WrongFieldEmbeddings),
        ("3.1", typed_probability_attention),
    ],
    ids=["typed-0.1-self-output", "wrong-field-output", "wrong-field-embeddings", "typed-0.1-eager-attention"],
)
def test_a_probability_that_is_not_the_configs_fails_the_dropout_check(task, obj):
    check(task, obj, upto="config")  # every check on the pretrained model and the other config's eval mode passes
    with pytest.raises(CheckFailed) as err:
        check(task, obj, only="dropout")
    message = str(err.value)
    assert "0.3" in message or "another config" in message, message


@pytest.mark.parametrize(
    "task, name",
    [
        ("4.1", "BertSelfOutput"),
        ("5.2", "BertOutput"),
        ("2.1", "BertEmbeddings"),
        ("3.1", "eager_attention_forward"),
        ("3.2", "BertSelfAttention"),
    ],
)
def test_the_solutions_pass_the_dropout_check(task, name, capsys):
    namespace = {**NB02, **NB03, **NB04, **NB05}
    check(task, namespace[name], only="dropout")
    assert "dropout passed" in capsys.readouterr().out
