"""Modules are called again and again: an answer kept from an earlier call, a write to a weight,
or state that changes a later answer fails the ``calls`` check, named; the right modules pass it,
and so do modules that store a value no later call reads (the last probabilities kept "for
visualisation", a running statistic nobody uses), as published implementations do.

Each wrong module is written as a learner would write it, from the solution notebooks' right
pieces: on one call it computes exactly HF's numbers, so every single-call check passes.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from bertlab.checks import TASKS, CheckFailed, check
from tests.conftest import solution_namespace

NB03 = solution_namespace("03-self-attention")
NB04 = solution_namespace("04-attention-output")
NB06 = solution_namespace("06-bert-model")
BertSelfAttention: Any = NB03["BertSelfAttention"]
BertModel: Any = NB06["BertModel"]
BertSelfOutput: Any = NB04["BertSelfOutput"]


class MaskCachedByShape(BertSelfAttention):
    """Keeps the first mask it sees for each mask shape ("the mask never changes for a batch size")."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        if attention_mask is not None:
            cache = self.__dict__.setdefault("masks", {})
            attention_mask = cache.setdefault(tuple(attention_mask.shape), attention_mask)
        return super().forward(hidden_states, attention_mask, **kwargs)


class ExtendedMaskKept(BertModel):
    """Builds the extended (additive) mask once and keeps it while the batch shape stays the same."""

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, **kwargs):
        if attention_mask is not None and getattr(self, "kept_shape", None) == tuple(attention_mask.shape):
            attention_mask = self.kept_mask
        else:
            self.kept_shape = None if attention_mask is None else tuple(attention_mask.shape)
            self.kept_mask = attention_mask
        return super().forward(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, **kwargs
        )


class WeightsDecayedInForward(BertSelfOutput):
    """Computes its output, then shrinks its own weight in place ("a little weight decay")."""

    def forward(self, hidden_states, input_tensor):
        out = super().forward(hidden_states, input_tensor)
        with torch.no_grad():
            self.dense.weight.mul_(0.999)
        return out


class CountsItsCalls(BertSelfOutput):
    """Right: keeps a running statistic of its inputs between calls, and never reads it."""

    def forward(self, hidden_states, input_tensor):
        self.seen = self.__dict__.get("seen", 0.0) + float(hidden_states.abs().mean())
        return super().forward(hidden_states, input_tensor)


class KeepsProbabilitiesForPlots(BertSelfAttention):
    """Right: stores the last attention probabilities "for visualisation", as published code does."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        context, probs = super().forward(hidden_states, attention_mask, **kwargs)
        self.attn = probs.detach()  # (B, heads, T, T): read by nobody during grading
        return context, probs


class UsesItsRunningStatistic(BertSelfOutput):
    """Wrong: rescales its update by the first call's input size, kept in an attribute."""

    def forward(self, hidden_states, input_tensor):
        size = float(hidden_states.abs().mean())
        self.reference_size = self.__dict__.get("reference_size", size)
        return super().forward(hidden_states * (self.reference_size / size), input_tensor)


@pytest.mark.parametrize(
    "task, cls, said",
    [
        ("3.2", MaskCachedByShape, "a second call with other inputs and mask of the same shape"),
        ("6.4", ExtendedMaskKept, "a second call with other inputs and mask of the same shape"),
        ("4.1", WeightsDecayedInForward, "forward writes to `self.dense.weight`, a parameter or buffer"),
    ],
    ids=["mask-cached-by-shape", "extended-mask-kept", "weights-written-in-forward"],
)
def test_state_kept_between_calls_fails_the_calls_check_named(task, cls, said):
    check(task, cls, upto="values")  # one call each: the numbers are HF's
    with pytest.raises(CheckFailed) as err:
        check(task, cls, only="calls")
    assert said in str(err.value), str(err.value)


SOLUTIONS = {**solution_namespace("02-embeddings"), **NB03, **NB04, **solution_namespace("05-feed-forward"), **NB06}


@pytest.mark.parametrize("task_id", [t for t, task in TASKS.items() if "calls" in task.stages])
def test_the_solutions_pass_the_calls_check(task_id, capsys):
    check(task_id, SOLUTIONS[TASKS[task_id].title], only="calls")
    assert "calls passed" in capsys.readouterr().out


@pytest.mark.parametrize(("task", "cls"), [("4.1", CountsItsCalls), ("3.2", KeepsProbabilitiesForPlots)])
def test_a_value_stored_and_never_read_passes_the_calls_check(task, cls, capsys):
    check(task, cls, only="calls")
    assert "calls passed" in capsys.readouterr().out


def test_state_that_changes_a_later_answer_is_named():
    with pytest.raises(CheckFailed) as err:
        check("4.1", UsesItsRunningStatistic, only="calls")
    assert "forward keeps `self.reference_size` from one call to the next" in str(err.value), str(err.value)
