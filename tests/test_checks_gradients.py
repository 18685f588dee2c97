"""Gradients are compared with HF's, not only found: values computed right but cut from the graph fail.

Each wrong module below is written as a learner would write it, from the solution notebooks' right
pieces: its forward values equal HF's, so every stage before ``gradients`` passes, and only the
gradients tell it apart. The right modules pass the same check, on every module task.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from bertlab.checks import TASKS, CheckFailed, check
from tests.conftest import solution_namespace

NB04 = solution_namespace("04-attention-output")
NB05 = solution_namespace("05-feed-forward")
NB06 = solution_namespace("06-bert-model")
BertSelfOutput: Any = NB04["BertSelfOutput"]
BertOutput: Any = NB05["BertOutput"]
BertLayer: Any = NB06["BertLayer"]
BertAttention: Any = NB04["BertAttention"]


class LayerNormStatsDetached(BertSelfOutput):
    """Add & Norm with a hand-written LayerNorm whose mean and variance are taken out of the graph."""

    def forward(self, hidden_states, input_tensor):
        x = self.dropout(self.dense(hidden_states)) + input_tensor  # (B, T, H)
        mean = x.mean(-1, keepdim=True).detach()
        var = x.var(-1, keepdim=True, unbiased=False).detach()
        return (x - mean) / torch.sqrt(var + self.LayerNorm.eps) * self.LayerNorm.weight + self.LayerNorm.bias


class ResidualDetached(BertOutput):
    """The FFN's Add & Norm adds a detached copy of its residual input."""

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor.detach())


class HiddenStatesDetachedInLayer(BertLayer):
    """A layer that hands the FFN a detached attention output (its second residual keeps the graph)."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        attention_output, _ = self.attention(hidden_states, attention_mask)
        return self.output(self.intermediate(attention_output.detach()), attention_output)


class ScoresScaledByItem(BertAttention):
    """BertAttention that rescales its output by a number taken out with .item() (1.0 here)."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        attention_output, probs = super().forward(hidden_states, attention_mask, **kwargs)
        norm = attention_output.norm().item()
        return attention_output * norm / attention_output.norm(), probs


@pytest.mark.parametrize(
    "task, cls, said",
    [
        # Gradients reach everything here: only their values tell these from the right module.
        ("4.1", LayerNormStatsDetached, "the gradient of `dense.weight` differs from HF's"),
        ("6.1", HiddenStatesDetachedInLayer, "the gradient of `attention."),
        ("4.2", ScoresScaledByItem, "the gradient of `"),
        # Here no gradient reaches the residual input at all.
        ("5.2", ResidualDetached, "no gradient reaches input_tensor"),
    ],
    ids=["layernorm-stats-detached", "layer-hidden-detached", "rescaled-by-item", "residual-detached"],
)
def test_a_module_cut_from_the_graph_passes_its_values_but_fails_its_gradients(task, cls, said):
    check(task, cls, upto="values")  # the values are right (the calls stage compares gradients too)
    with pytest.raises(CheckFailed) as err:
        check(task, cls, only="gradients")
    assert said in str(err.value), str(err.value)
    if "arguments" in TASKS[task].stages:  # it compares gradients too, under another config
        with pytest.raises(CheckFailed) as err:
            check(task, cls, only="arguments")
        assert "gradient" in str(err.value).splitlines()[0], str(err.value)


MODULE_TASKS = [task_id for task_id, task in TASKS.items() if "gradients" in task.stages]
SOLUTIONS = {**solution_namespace("02-embeddings"), **solution_namespace("03-self-attention"), **NB04, **NB05, **NB06}


@pytest.mark.parametrize("task_id", MODULE_TASKS)
def test_every_module_task_compares_gradient_values_and_the_solution_passes(task_id, monkeypatch):
    """The comparison runs (HF's gradients are computed and aligned) for every module task, and the
    solution's gradients equal HF's."""
    from bertlab.checks import module_task

    task = TASKS[task_id]
    compared = []
    real = module_task.ModuleTask.reference_gradients

    def spy(self, *args, located=None, **kwargs):
        compared.append((self.id, "train" if located is not None else "eval"))
        return real(self, *args, located=located, **kwargs)

    monkeypatch.setattr(module_task.ModuleTask, "reference_gradients", spy)
    check(task_id, SOLUTIONS[task.title], only="gradients")
    assert compared[0] == (task_id, "eval") and set(compared) <= {(task_id, "eval"), (task_id, "train")}, compared


BertIntermediate: Any = NB05["BertIntermediate"]


class ReluIntermediate(BertIntermediate):
    """Task 5.1 with ReLU: its values differ from HF's, and with them its gradients."""

    def forward(self, hidden_states):
        return torch.relu(self.dense(hidden_states))


def test_a_gradient_check_run_alone_says_the_values_differ_rather_than_a_cut_graph():
    """Run alone, the gradients check has not seen the values check pass: it measures the values on
    its inputs before telling the learner they are right."""
    with pytest.raises(CheckFailed) as err:
        check("5.1", ReluIntermediate, only="gradients")
    said = str(err.value)
    assert "differ from HF's too" in said and "cut from the graph" not in said, said
    with pytest.raises(CheckFailed) as err:  # values right, gradients cut: the cut is still named
        check("5.2", ResidualDetached, only="gradients")
    assert "values differ" not in str(err.value)


class _NanInBackward(torch.autograd.Function):
    """Identity forward; backward puts NaN in one element of the gradient it passes on."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        grad.view(-1)[0] = float("nan")
        return grad


class NanGradient(BertOutput):
    """Right values; one NaN in the input's gradient (a learner's custom backward). It passed once:
    only the parameters' gradients were checked for NaN, and NaN compared as within tolerance."""

    def forward(self, hidden_states, input_tensor):
        return super().forward(_NanInBackward.apply(hidden_states), input_tensor)


def test_a_gradient_with_one_nan_element_is_named_not_finite():
    with pytest.raises(CheckFailed, match=r"gradients of the input `hidden_states` are not finite"):
        check("5.2", NanGradient, only="gradients")


@pytest.mark.parametrize(
    "values, expected",
    [
        ([1.0, -3.0], 3.0),
        ([1.0, float("nan"), 2.0], "nan"),
        ([float("-inf"), 0.0], float("inf")),
        ([], 0.0),
        ([3j, -4.0], 4.0),  # a learner's complex parameters give complex gradients
    ],
)
def test_a_gradients_peak_tells_its_size_and_whether_it_is_finite(values, expected):
    """One pass over each gradient answers three questions (reached, finite, its size): that rests
    on torch's ``max`` propagating NaN, which this fails without."""
    from bertlab.checks.stage_gradients import peak

    found = peak(torch.tensor(values))
    assert (found != found) if expected == "nan" else found == expected, found
