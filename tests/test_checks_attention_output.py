"""Task 4's checks: the solution notebook's classes pass; each known Add & Norm mistake is named at
4.1 (4.2 runs HF's own BertSelfOutput in ``output``: see test_checks_isolation), the composition's
mistakes at 4.2; failures read well."""

from __future__ import annotations

import copy
import re
from typing import Any

import nbformat
import pytest
import torch
from torch import nn

from bertlab import capture, reference
from bertlab.checks import CheckFailed, check
from bertlab.diagnose import attention_output as flawed
from bertlab.diagnose import common
from tests.conftest import solution_namespace, solution_notebook

# Learner-style right code: the solution notebook's classes (transformers' own are refused).
NS = solution_namespace("04-attention-output")
BertAttention: Any = NS["BertAttention"]
BertSelfOutput: Any = NS["BertSelfOutput"]


def wrong_add_norm(base: type, mistake: str) -> type:
    """The solution's BertSelfOutput or BertOutput (``base``) with ``mistake`` written the way a learner might."""

    def forward(self, hidden_states, input_tensor):
        update = self.dense(hidden_states)
        if mistake == "layernorm-before-residual":
            return self.LayerNorm(self.dropout(update)) + input_tensor
        if mistake == "residual-missing":
            return self.LayerNorm(self.dropout(update))
        if mistake == "residual-added-to-itself":  # LayerNorm(2u) == LayerNorm(u): no residual either
            update = self.dropout(update)
            return self.LayerNorm(update + update)
        if mistake == "residual-wrong-tensor":
            return self.LayerNorm(self.dropout(update) + hidden_states)
        if mistake == "dropout-after-layernorm":
            return self.dropout(self.LayerNorm(update + input_tensor))
        if mistake == "dropout-on-residual-sum":
            return self.LayerNorm(self.dropout(update + input_tensor))
        if mistake == "dropout-in-eval":
            return self.LayerNorm(nn.functional.dropout(update, self.dropout.p, training=True) + input_tensor)
        return base.forward(self, hidden_states, input_tensor)

    def __init__(self, config):
        base.__init__(self, config)
        if mistake == "layernorm-eps-default":
            self.LayerNorm = nn.LayerNorm(config.hidden_size)
        elif mistake == "layernorm-eps-by-hand":
            self.LayerNorm = HandLayerNorm(config.hidden_size)

    return type(f"{base.__name__}_{mistake}", (base,), {"__init__": __init__, "forward": forward})


class HandLayerNorm(nn.Module):
    """A LayerNorm written out, with torch's default eps hidden inside (no ``eps`` attribute)."""

    def __init__(self, size):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.bias = nn.Parameter(torch.zeros(size))

    def forward(self, x):
        mean, var = x.mean(-1, keepdim=True), x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + flawed.TORCH_LAYER_NORM_EPS) + self.bias


def attention_with(output_cls: type) -> type:
    """The solution's BertAttention whose ``output`` is ``output_cls``."""

    def __init__(self, config):
        NS["BertAttention"].__init__(self, config)
        self.output = output_cls(config)

    return type(f"BertAttention_{output_cls.__name__}", (NS["BertAttention"],), {"__init__": __init__})


class SwappedArguments(BertAttention):
    def forward(self, hidden_states, attention_mask=None, **kwargs):
        context, probs = self.self(hidden_states, attention_mask)
        return self.output(hidden_states, context), probs


class MaskNotPassed(BertAttention):
    def forward(self, hidden_states, attention_mask=None, **kwargs):
        context, probs = self.self(hidden_states)
        return self.output(context, hidden_states), probs


class ResidualIsContext(BertAttention):
    def forward(self, hidden_states, attention_mask=None, **kwargs):
        context, probs = self.self(hidden_states, attention_mask)
        return self.output(context, context), probs


class FunctionalDropout(BertSelfOutput):
    """Right, with dropout written as a function call: draws the same masks as nn.Dropout."""

    def forward(self, hidden_states, input_tensor):
        update = nn.functional.dropout(self.dense(hidden_states), self.dropout.p, self.training)
        return self.LayerNorm(update + input_tensor)


@pytest.mark.parametrize(
    "task, cls", [("4.1", NS["BertSelfOutput"]), ("4.2", NS["BertAttention"]), ("4.1", FunctionalDropout)]
)
def test_right_code_passes(task, cls, capsys):
    check(task, cls)
    assert f"[Task {task}] {'BertSelfOutput' if task == '4.1' else 'BertAttention'} passed" in capsys.readouterr().out


def test_nothing_hard_wired_to_the_pretrained_sizes(tiny_bert_dir, monkeypatch):
    monkeypatch.setenv(reference.ENV_VAR, str(tiny_bert_dir))
    check("4.1", NS["BertSelfOutput"])
    check("4.2", NS["BertAttention"])
    assert capture.capture().hidden_states[0].shape[-1] == 32
    with pytest.raises(CheckFailed) as err:
        check("4.1", wrong_add_norm(NS["BertSelfOutput"], "layernorm-before-residual"))
    assert err.value.mistake == "layernorm-before-residual"


MISTAKES = [
    "layernorm-before-residual",
    "residual-missing",
    "residual-wrong-tensor",
    "layernorm-eps-default",
    "dropout-after-layernorm",
    "dropout-on-residual-sum",
    "dropout-in-eval",
]


@pytest.mark.parametrize("mistake", MISTAKES)
def test_mistakes_in_self_output_are_named(mistake):
    cls = wrong_add_norm(NS["BertSelfOutput"], mistake)
    with pytest.raises(CheckFailed) as err:
        check("4.1", cls)
    assert err.value.mistake == mistake, str(err.value)
    assert f"(known mistake `{mistake}`)" in str(err.value)
    assert re.search(r'\n  See lessons/\d\d-[a-z-]+ \(section "[^"]+"\)\.$', str(err.value))


@pytest.mark.parametrize(
    "wrong, expected",
    [
        # the dense output added to itself: LayerNorm cancels the factor 2, so it IS "no residual"
        ("residual-added-to-itself", "residual-missing"),
        # no eps attribute to inspect: recognised from the values
        ("layernorm-eps-by-hand", "layernorm-eps-default"),
    ],
)
def test_other_forms_of_a_mistake_are_named(wrong, expected):
    with pytest.raises(CheckFailed) as err:
        check("4.1", wrong_add_norm(NS["BertSelfOutput"], wrong))
    assert err.value.mistake == expected, str(err.value)


@pytest.mark.parametrize(
    "cls, mistake",
    [
        (SwappedArguments, "attention-output-wrong-order"),
        (MaskNotPassed, "attention-mask-not-passed"),
        (ResidualIsContext, "residual-wrong-tensor"),
    ],
)
def test_mistakes_in_the_composition_are_named(cls, mistake):
    with pytest.raises(CheckFailed, match=r"^\[Task 4\.2\] BertAttention: `attention_output` values differ") as err:
        check("4.2", cls)
    assert err.value.mistake == mistake, str(err.value)


def test_an_eps_that_is_not_torch_default_fails_without_a_name():
    class Eps(NS["BertSelfOutput"]):
        def __init__(self, config):
            super().__init__(config)
            self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=1e-7)

    want = reference.load_config().layer_norm_eps
    with pytest.raises(
        CheckFailed, match=rf"`self\.LayerNorm\.eps` is 1e-07, expected config\.layer_norm_eps = {want:g}"
    ) as err:
        check("4.1", Eps, upto="names")
    assert err.value.mistake is None


class ReturnsTuple(BertSelfOutput):
    def forward(self, hidden_states, input_tensor):
        return (super().forward(hidden_states, input_tensor),)


class ReturnsOnlyOutput(BertAttention):
    def forward(self, hidden_states, attention_mask=None, **kwargs):
        return super().forward(hidden_states, attention_mask)[0]


class Shifted(BertSelfOutput):
    def forward(self, hidden_states, input_tensor):
        return super().forward(hidden_states, input_tensor) + 0.5


@pytest.mark.parametrize(
    "task, cls, expected",
    [
        ("4.1", ReturnsTuple, r"forward must return one tensor \(hidden_states\), like HF's; got tuple"),
        ("4.2", ReturnsOnlyOutput, r"must return a tuple \(attention_output, attn_weights\).*got a tensor"),
        (
            "4.1",
            Shifted,
            r"values differ from the pretrained layer 0 \(atol 1e-05, rtol 1.9e-06\)\n"
            r"  max abs diff 5.0e-01 at \(batch \d+, token \d+, dim \d+\): expected .*, got ",
        ),
    ],
)
def test_failures_say_what_and_where(task, cls, expected):
    with pytest.raises(CheckFailed, match=expected) as err:
        check(task, cls)
    assert err.value.mistake is None


@pytest.mark.parametrize("part", ["attention", "attention.output", "output"])
def test_the_unflawed_simulation_is_hfs_module(part):
    """The mistakes are simulated by editing a copy of HF's computation: the copy must be exact,
    in eval mode and, from one seed, in train mode (same dropout masks, same order)."""
    module = reference.load_model().encoder.layer[1].get_submodule(part)
    call = capture.capture().layer(1, part)
    if part == "attention":
        inputs = {"hidden_states": call.args[0], "attention_mask": call.args[1]}
    else:
        inputs = {"hidden_states": call.args[0], "input_tensor": call.args[1]}
    out = call.output[0] if part == "attention" else call.output
    with torch.no_grad():
        assert torch.equal(next(iter(flawed.simulate(module, inputs).values())), out)
        trained = copy.deepcopy(module).train()
        want = common.seeded(lambda: trained(**inputs))
        got = common.seeded(lambda: flawed.simulate(module, inputs, training=True))
    want = want[0] if part == "attention" else want
    assert not torch.equal(want, out)  # dropout did act
    torch.testing.assert_close(next(iter(got.values())), want, rtol=0, atol=1e-6)


def test_the_given_self_attention_is_task_3s_solution():
    """Notebook 04 gives the learner Task 3's code; it must not drift from the Task 3 solution."""

    def unmarked(source):
        return "\n".join(
            line for line in source.splitlines() if not re.fullmatch(r"\s*### (BEGIN|END) SOLUTION\s*", line)
        )

    task3 = nbformat.read(solution_notebook("03-self-attention"), as_version=4)
    solved = [unmarked(c.source) for c in task3.cells if c.metadata.get("nbgrader", {}).get("solution")]
    task4 = nbformat.read(solution_notebook("04-attention-output"), as_version=4)
    given = [c.source for c in task4.cells if c.cell_type == "code" and "class BertSelfAttention" in c.source]
    assert len(given) == 1 and not given[0].count("### BEGIN SOLUTION")
    squash = lambda s: re.sub(r"\s+", " ", s).strip()  # noqa: E731
    assert squash(given[0]) == squash("\n".join(solved))


# -- a LayerNorm written by hand: its statistics mistakes are named, its eps message measured ------


class StudentLayerNorm(nn.Module):
    """A LayerNorm as published student code writes it: an ``eps`` attribute, torch.std (unbiased)."""

    def __init__(self, size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.bias = nn.Parameter(torch.zeros(size))
        self.eps = eps

    def forward(self, x):  # (B, T, H) -> (B, T, H)
        mean, std = x.mean(-1, keepdim=True), x.std(-1, keepdim=True)
        return self.weight * (x - mean) / (std + self.eps) + self.bias


def with_layer_norm(base: type, norm) -> type:
    """``base`` (BertSelfOutput or BertOutput) whose ``LayerNorm`` is ``norm(config)``."""

    def __init__(self, config):
        base.__init__(self, config)
        self.LayerNorm = norm(config)

    return type(f"{base.__name__}_hand_norm", (base,), {"__init__": __init__})


def test_an_eps_message_measures_what_it_claims():
    """The eps differs and so does the std: the message must not say the outputs differ by little."""
    cls = with_layer_norm(NS["BertSelfOutput"], lambda config: StudentLayerNorm(config.hidden_size))
    with pytest.raises(CheckFailed) as err:
        check("4.1", cls, upto="names")
    message = str(err.value)
    # the eps alone, yours, and yours with the config's eps
    alone, yours, with_eps = (float(x) for x in re.findall(r"by up to ([\d.e+-]+)", message))
    assert yours > 10 * alone and with_eps > 10 * alone, message
    assert "more than the eps differs" in message, message
    assert "only about" not in message


class WrongAxis(nn.Module):
    """Statistics over the tokens: ``x.mean(1)`` on a (B, T, H) tensor."""

    def __init__(self, config):
        super().__init__()
        self.weight, self.bias = (
            nn.Parameter(torch.ones(config.hidden_size)),
            nn.Parameter(torch.zeros(config.hidden_size)),
        )
        self.variance_epsilon = config.layer_norm_eps

    def forward(self, x):
        mean = x.mean(dim=1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=1, keepdim=True)
        return self.weight * (x - mean) * torch.rsqrt(var + self.variance_epsilon) + self.bias


class UnbiasedVariance(WrongAxis):
    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        var = centred.pow(2).sum(-1, keepdim=True) / (x.shape[-1] - 1)
        return self.weight * centred / torch.sqrt(var + self.variance_epsilon) + self.bias


class EpsOnStd(WrongAxis):
    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        return (
            self.weight * centred / (centred.pow(2).mean(-1, keepdim=True).sqrt() + self.variance_epsilon) + self.bias
        )


@pytest.mark.parametrize("task, base", [("4.1", "BertSelfOutput"), ("5.2", "BertOutput")])
@pytest.mark.parametrize(
    "norm, mistake",
    [
        (WrongAxis, "layernorm-wrong-axis"),
        (UnbiasedVariance, "unbiased-variance"),
        (lambda config: StudentLayerNorm(config.hidden_size, config.layer_norm_eps), "unbiased-variance"),
        (EpsOnStd, "layernorm-eps-outside-sqrt"),
    ],
)
def test_hand_written_layer_norm_mistakes_are_named(task, base, norm, mistake):
    classes = NS if base in NS else solution_namespace("05-feed-forward")
    with pytest.raises(CheckFailed) as err:
        check(task, with_layer_norm(classes[base], norm))
    assert err.value.mistake == mistake, str(err.value)
    assert 'See lessons/06-layernorm (section "LayerNorm by hand")' in str(err.value)
