"""A module a check builds skips nn.init's random draws (the pretrained weights overwrite them), and
no verdict can depend on that: a value read before the weights load is NaN, never a zero that
could make wrong code look right."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bertlab.checks import CheckFailed, check
from bertlab.checks.harness import invoke
from tests.conftest import solution_namespace


class Probe(nn.Module):
    """Records what nn.init gave it while it was built."""

    def __init__(self, fail: bool = False):
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.drawn = nn.init.normal_(torch.empty(3)).clone()
        if fail:
            raise ValueError("broken __init__")


def test_a_built_module_draws_no_random_numbers_and_nn_init_comes_back():
    real = nn.init.normal_
    outcome = invoke(Probe)
    assert outcome.kind == "ok"
    assert torch.isnan(outcome.value.drawn).all() and torch.isnan(outcome.value.linear.weight).all()
    assert nn.init.normal_ is real
    assert not torch.isnan(nn.init.normal_(torch.empty(3))).any()


def test_nn_init_comes_back_when_the_constructor_raises():
    real = nn.init.kaiming_uniform_
    assert invoke(Probe, (True,)).kind == "error"
    assert nn.init.kaiming_uniform_ is real


def test_calls_that_build_nothing_keep_nn_init():
    outcome = invoke(lambda: nn.init.normal_(torch.empty(5)))
    assert outcome.kind == "ok" and not torch.isnan(outcome.value).any()


def test_a_random_tensor_kept_outside_the_state_dict_still_fails():
    """Wrong code whose error is a tensor drawn in __init__ and never loaded: were the draw a zero,
    it would pass; it is NaN, so its outputs differ from HF's as they would with random values."""
    right = solution_namespace("05-feed-forward")["BertIntermediate"]

    class Shifted(right):
        def __init__(self, config):
            super().__init__(config)
            self.shift = nn.init.normal_(torch.empty(config.intermediate_size), std=1e-2)

        def forward(self, hidden_states):
            return super().forward(hidden_states) + self.shift

    check("5.1", right, upto="values")
    with pytest.raises(CheckFailed, match=r"\[Task 5\.1\]"):
        check("5.1", Shifted, upto="values")


def test_the_solution_s_bert_model_draws_nothing_while_built():
    """What the patch saves holds only while torch's modules draw their starting values through
    nn.init's fillers: the course grading the solutions builds 21 BertModels, 24 BertEmbeddings and
    13 BertEncoders (and smaller modules), and a BertModel took 0.30 s to build with random draws,
    0.12 s without (medians of 12 builds each, on a busy machine). A torch whose modules draw
    elsewhere fails here: then list the new filler, or measure again whether the patch still pays."""
    from bertlab.reference import load_model

    config = load_model().config
    model = solution_namespace("06-bert-model")["BertModel"]
    before = torch.random.get_rng_state()
    assert invoke(model, (config,)).kind == "ok"
    assert torch.equal(torch.random.get_rng_state(), before)
    model(config)  # the same build outside a check draws, so the comparison above can fail
    assert not torch.equal(torch.random.get_rng_state(), before)
