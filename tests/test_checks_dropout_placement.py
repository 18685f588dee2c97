"""The dropout check: where dropout acts, in train mode, against HF's module.

Right code passes, also when it draws its masks with ``nn.functional.dropout`` instead of
``self.dropout``; each placement mistake, written the way a learner might (subclasses of the
solution notebooks' classes), is named; a misplacement that is no known mistake says where HF's
dropout acts. The expected outputs are always computed by HF's modules, never typed in.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bertlab.checks import CheckFailed, check
from bertlab.diagnose import common
from bertlab.diagnose.common import DropoutProbe
from tests.conftest import solution_namespace

F = nn.functional


@pytest.fixture(scope="module")
def learner() -> dict:
    return solution_namespace("02-embeddings", "03-self-attention", "04-attention-output", "05-feed-forward")


def add_norm_variant(base: type, placement: str) -> type:
    """The solution's BertSelfOutput or BertOutput (``base``) with dropout placed by ``placement``."""

    def forward(self, hidden_states, input_tensor):
        if placement == "dropout-on-residual-sum":
            return self.LayerNorm(self.dropout(self.dense(hidden_states) + input_tensor))
        if placement == "dropout-on-residual-sum-functional":
            summed = self.dense(hidden_states) + input_tensor
            return self.LayerNorm(F.dropout(summed, self.dropout.p, self.training))
        if placement == "dropout-after-layernorm":
            return self.dropout(self.LayerNorm(self.dense(hidden_states) + input_tensor))
        if placement == "dropout-on-sublayer-input":
            return self.LayerNorm(self.dense(self.dropout(hidden_states)) + input_tensor)
        if placement == "dropout-missing":
            return self.LayerNorm(self.dense(hidden_states) + input_tensor)
        if placement == "dropout-twice":  # no known mistake: the update dropped two times
            return self.LayerNorm(self.dropout(self.dropout(self.dense(hidden_states))) + input_tensor)
        if placement == "functional":  # right: the same masks drawn by a function call
            update = F.dropout(self.dense(hidden_states), self.dropout.p, self.training)
            return self.LayerNorm(update + input_tensor)
        raise ValueError(placement)

    return type(f"{base.__name__}_{placement}", (base,), {"forward": forward})


@pytest.mark.parametrize("task, name", [("4.1", "BertSelfOutput"), ("5.2", "BertOutput")])
@pytest.mark.parametrize("placement", ["solution", "functional"])
def test_right_placements_pass(learner, task, name, placement, capsys):
    cls = learner[name] if placement == "solution" else add_norm_variant(learner[name], placement)
    check(task, cls, only="dropout")
    assert f"[Task {task}] {name}: dropout passed" in capsys.readouterr().out


@pytest.mark.parametrize("task, name", [("4.1", "BertSelfOutput"), ("5.2", "BertOutput")])
@pytest.mark.parametrize(
    "placement, mistake",
    [
        ("dropout-on-residual-sum", "dropout-on-residual-sum"),
        ("dropout-on-residual-sum-functional", "dropout-on-residual-sum"),
        ("dropout-after-layernorm", "dropout-after-layernorm"),
        ("dropout-on-sublayer-input", "dropout-on-sublayer-input"),
        ("dropout-missing", "dropout-missing"),
    ],
)
def test_add_and_norm_placements_are_named(learner, task, name, placement, mistake):
    with pytest.raises(CheckFailed, match=rf"^\[Task {task}\] {name}: in train mode, `hidden_states` differs") as err:
        check(task, add_norm_variant(learner[name], placement), only="dropout")
    assert err.value.mistake == mistake, str(err.value)
    assert f"(known mistake `{mistake}`)" in str(err.value)


def test_dropout_applied_twice_is_named_not_told_where_hf_drops(learner):
    """Its dropout is at HF's place already: the hint saying where HF drops described its own code."""
    with pytest.raises(CheckFailed) as err:
        check("4.1", add_norm_variant(learner["BertSelfOutput"], "dropout-twice"), only="dropout")
    assert err.value.mistake == "dropout-applied-twice", str(err.value)
    assert common.WHERE["4.1"] not in str(err.value)


def test_the_residual_sum_used_to_pass_the_eval_mode_checks(learner, capsys):
    """The issue: eval mode cannot see this mistake, so every check before dropout passes."""
    cls = add_norm_variant(learner["BertOutput"], "dropout-on-residual-sum")
    check("5.2", cls, upto="config")
    with pytest.raises(CheckFailed):
        check("5.2", cls, only="dropout")


def self_attention_variant(base: type, placement: str) -> type:
    """The solution's BertSelfAttention with its dropout moved, written out without the 3.1 function."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        B, T, _ = hidden_states.shape
        split = lambda x: x.view(B, T, self.num_attention_heads, self.attention_head_size).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.query(hidden_states)), split(self.key(hidden_states)), split(self.value(hidden_states))
        scores = q @ k.transpose(-1, -2) / self.attention_head_size**0.5
        if attention_mask is not None:
            scores = scores + attention_mask
        probs = scores.softmax(-1)
        if placement == "probs-module":  # right: nn.Dropout on the probabilities
            probs = self.dropout(probs)
        context = (probs @ v).transpose(1, 2).reshape(B, T, -1)
        if placement == "attention-dropout-on-context":
            context = self.dropout(context)
        return context, probs

    return type(f"BertSelfAttention_{placement}", (base,), {"forward": forward})


def test_self_attention_with_a_dropout_module_passes(learner, capsys):
    check("3.2", self_attention_variant(learner["BertSelfAttention"], "probs-module"), only="dropout")
    assert "dropout passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "placement, mistake",
    [
        ("attention-dropout-on-context", "attention-dropout-on-context"),
        ("missing", "dropout-missing"),
    ],
)
def test_self_attention_placements_are_named(learner, placement, mistake):
    with pytest.raises(CheckFailed, match=r"^\[Task 3\.2\] BertSelfAttention: in train mode") as err:
        check("3.2", self_attention_variant(learner["BertSelfAttention"], placement), only="dropout")
    assert err.value.mistake == mistake, str(err.value)


def embeddings_variant(base: type, placement: str) -> type:
    """The solution's BertEmbeddings with dropout before the LayerNorm, or none."""

    def forward(
        self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None, past_key_values_length=0
    ):
        _B, T = input_ids.shape
        if position_ids is None:
            position_ids = self.position_ids[:, :T]
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        total = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(position_ids)
            + self.token_type_embeddings(token_type_ids)
        )
        if placement == "embeddings-dropout-before-layernorm":
            return self.LayerNorm(self.dropout(total))
        return self.LayerNorm(total)

    return type(f"BertEmbeddings_{placement}", (base,), {"forward": forward})


@pytest.mark.parametrize(
    "placement, mistake",
    [
        ("embeddings-dropout-before-layernorm", "embeddings-dropout-before-layernorm"),
        ("missing", "dropout-missing"),
    ],
)
def test_embeddings_placements_are_named(learner, placement, mistake):
    with pytest.raises(CheckFailed, match=r"^\[Task 2\.1\] BertEmbeddings: in train mode") as err:
        check("2.1", embeddings_variant(learner["BertEmbeddings"], placement), only="dropout")
    assert err.value.mistake == mistake, str(err.value)


def test_the_probe_masks_depend_on_the_shape_only():
    x = torch.ones(3, 5, 7)
    a, b = DropoutProbe(0.3).train(), DropoutProbe(0.3).train()
    torch.manual_seed(1)
    first = a(x)
    torch.manual_seed(2)
    assert torch.equal(first, b(x))  # torch's global generator plays no part
    assert 0 < int((first == 0).sum()) < x.numel()  # and it does drop
    assert torch.equal(DropoutProbe(0.3).eval()(x), x)
