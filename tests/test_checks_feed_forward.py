"""Task 5's checks: the solution notebook's classes pass; GELU's look-alikes and the second Add &
Norm's mistakes (dropout placements included) are named; failures read well."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from torch import nn
from transformers.activations import ACT2FN

from bertlab import capture, reference
from bertlab.checks import TASKS, CheckFailed, check
from tests.conftest import solution_namespace
from tests.test_checks_attention_output import wrong_add_norm

# Learner-style right code: the solution notebook's classes (transformers' own are refused).
NS = solution_namespace("05-feed-forward")
BertIntermediate: Any = NS["BertIntermediate"]
BertOutput: Any = NS["BertOutput"]


def intermediate_with(activation) -> type:
    """The solution's BertIntermediate with ``activation`` as ``intermediate_act_fn``."""

    def __init__(self, config):
        NS["BertIntermediate"].__init__(self, config)
        del self.intermediate_act_fn  # a module; a plain function may replace it only once it is gone
        self.intermediate_act_fn = activation

    return type(f"BertIntermediate_{type(activation).__name__}", (NS["BertIntermediate"],), {"__init__": __init__})


def erf_gelu(x):
    """GELU from its definition, x * Phi(x)."""
    return 0.5 * x * (1 + torch.erf(x / 2**0.5))


@pytest.mark.parametrize(
    "task, cls",
    [
        ("5.1", NS["BertIntermediate"]),
        ("5.1", intermediate_with(nn.GELU())),
        ("5.1", intermediate_with(erf_gelu)),
        ("5.2", NS["BertOutput"]),
    ],
)
def test_right_code_passes(task, cls, capsys):
    check(task, cls)
    assert re.search(rf"^\[Task {re.escape(task)}\] Bert\w+ passed", capsys.readouterr().out, re.M)


def tanh_gelu(x):
    """GELU's tanh approximation written out ("gelu_new" in a BERT config)."""
    return 0.5 * x * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (x + 0.044715 * x**3)))


def test_transformers_activation_is_refused_with_the_reason():
    """A module task is written with torch alone: transformers' ACT2FN is transformers' code, which
    a notebook being graded cannot even import (its process cannot read transformers)."""
    with pytest.raises(CheckFailed, match=r"`intermediate_act_fn` is built on transformers' GELUActivation"):
        check("5.1", intermediate_with(ACT2FN["gelu"]))


def test_nothing_hard_wired_to_the_pretrained_sizes(tiny_bert_dir, monkeypatch):
    monkeypatch.setenv(reference.ENV_VAR, str(tiny_bert_dir))
    check("5.1", NS["BertIntermediate"])
    check("5.2", NS["BertOutput"])
    assert capture.capture().layer(0, "intermediate").output.shape[-1] == 64
    with pytest.raises(CheckFailed) as err:
        check("5.1", intermediate_with(nn.ReLU()))
    assert err.value.mistake == "relu-instead-of-gelu"


@pytest.mark.parametrize(
    "activation, mistake",
    [
        (nn.GELU(approximate="tanh"), "tanh-gelu"),
        (tanh_gelu, "tanh-gelu"),
        (nn.ReLU(), "relu-instead-of-gelu"),
        (nn.Identity(), "activation-missing"),
    ],
)
def test_activation_mistakes_are_named(activation, mistake):
    with pytest.raises(
        CheckFailed, match=r"^\[Task 5\.1\] BertIntermediate: values differ from the pretrained layer 0"
    ) as err:
        check("5.1", intermediate_with(activation))
    assert err.value.mistake == mistake, str(err.value)
    assert f"(known mistake `{mistake}`)" in str(err.value)


@pytest.mark.parametrize(
    "wrong, mistake",
    [
        ("layernorm-before-residual", "layernorm-before-residual"),
        ("residual-missing", "residual-missing"),
        ("residual-added-to-itself", "residual-missing"),
        ("layernorm-eps-default", "layernorm-eps-default"),
        ("layernorm-eps-by-hand", "layernorm-eps-default"),
        ("dropout-after-layernorm", "dropout-after-layernorm"),
        ("dropout-in-eval", "dropout-in-eval"),
        ("dropout-on-residual-sum", "dropout-on-residual-sum"),
    ],
)
def test_second_add_and_norm_mistakes_are_named(wrong, mistake):
    with pytest.raises(CheckFailed, match=r"^\[Task 5\.2\] BertOutput: ") as err:
        check("5.2", wrong_add_norm(NS["BertOutput"], wrong))
    assert err.value.mistake == mistake, str(err.value)


class Renamed(BertIntermediate):
    def __init__(self, config):
        super().__init__(config)
        self.act = self.intermediate_act_fn
        del self.intermediate_act_fn

    def forward(self, hidden_states):
        return self.act(self.dense(hidden_states))


def test_a_missing_activation_attribute_costs_the_names_cell_only(capsys):
    """Renamed keeps its GELU under another name: the weights load and every output and gradient
    is HF's, so every check after the names check passes, and says the names check failed."""
    check("5.1", Renamed)
    n = len(TASKS["5.1"].stages)
    out = capsys.readouterr().out
    assert "passed; names failed, which the cell that checks names and shapes counts" in out, out
    assert f"passed ({n}/{n} checks)" not in out


class NarrowDense(BertIntermediate):
    def __init__(self, config):
        super().__init__(config)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)


class ReturnsInput(BertOutput):
    def forward(self, hidden_states, input_tensor):
        return input_tensor


@pytest.mark.parametrize(
    "task, cls, expected",
    [
        ("5.1", Renamed, r"`self\.intermediate_act_fn` is missing or not callable"),
        ("5.1", NarrowDense, r"parameter shapes differ from HF's\n  dense.weight: expected \[\d+, \d+\], got"),
        ("5.2", ReturnsInput, r"values differ from the pretrained layer 0 \(atol 1e-05, rtol 1.9e-06\)\n  max abs"),
    ],
)
def test_failures_say_what_and_where(task, cls, expected):
    # Renamed's outputs are right: its names failure blocks nothing, so the names cell's run shows it
    with pytest.raises(CheckFailed, match=expected) as err:
        check(task, cls, upto="shapes" if cls is Renamed else None)
    assert err.value.mistake is None
