"""The values tolerance follows float32's rounding at the size of each value: right code that is
more exact than HF's (float64, cast back) or sums in another order passes; half precision fails
with a message that names it. End to end, the same forms are bad-submission cases
(tests/submissions.py); their margins are in tests/tolerance_sweep.py's tables."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch.func import functional_call
from torch.nn import functional as F

from bertlab.checks import CheckFailed, check
from bertlab.checks.compare import RTOL, allclose, worst_position
from tests.conftest import solution_namespace

NS = solution_namespace("05-feed-forward")
BertIntermediate: Any = NS["BertIntermediate"]
NB06 = solution_namespace("06-bert-model")


def intermediate(dense) -> type:
    """The solution's BertIntermediate whose forward computes ``dense(module, hidden_states)``,
    then its GELU, and returns float32."""

    def forward(self, hidden_states):
        return self.intermediate_act_fn(dense(self, hidden_states)).to(hidden_states.dtype)

    return type(f"BertIntermediate_{dense.__name__}", (BertIntermediate,), {"forward": forward})


def in_float64(m, x):
    return F.linear(x.double(), m.dense.weight.double(), m.dense.bias.double())


def with_einsum(m, x):
    return torch.einsum("bti,oi->bto", x, m.dense.weight) + m.dense.bias


def with_addmm(m, x):
    return torch.addmm(m.dense.bias, x.reshape(-1, x.shape[-1]), m.dense.weight.t()).reshape(*x.shape[:-1], -1)


def in_float16(m, x):
    return F.linear(x.half(), m.dense.weight.half(), m.dense.bias.half()).float()  # GELU in float32


def in_bfloat16(m, x):
    return F.linear(x.bfloat16(), m.dense.weight.bfloat16(), m.dense.bias.bfloat16())  # GELU in bfloat16


@pytest.mark.parametrize("dense", [in_float64, with_einsum, with_addmm])
def test_right_code_that_rounds_otherwise_passes(dense):
    """float64 inside failed an absolute 1e-5 alone: 1.5e-5 from HF's float32 at a value of 20.3."""
    check("5.1", intermediate(dense), upto="batches")


@pytest.mark.parametrize(
    "dense, named",
    [
        (in_float16, r"computes in float16: float16 keeps 11 bits"),
        (in_bfloat16, r"every value is a bfloat16 number(?s:.*)bfloat16 keeps 8 bits"),
    ],
)
def test_half_precision_fails_naming_it(dense, named):
    with pytest.raises(CheckFailed, match=named) as err:
        check("5.1", intermediate(dense), upto="values")
    assert err.value.cause == "values" and "compute in float32" in str(err.value)


def test_a_bfloat16_layernorm_is_named_bfloat16_not_float16():
    """A LayerNorm's outputs in bfloat16 are all float16 numbers too (no tiny values): the
    output's grid names bfloat16, the coarser of the two that holds them."""
    from bertlab.checks.precision import output_precision

    torch.manual_seed(0)
    x = torch.randn(4, 8, 384)  # (B, T, H)
    ln = torch.nn.LayerNorm(384).bfloat16()
    got = ln(x.bfloat16()).float()
    assert bool((got.half().float() == got).all())  # on float16's grid as well
    assert output_precision(got) == torch.bfloat16
    assert output_precision(F.layer_norm(x.half(), (384,)).float()) == torch.float16


def test_the_tolerance_grows_with_the_value():
    expected = torch.tensor([0.5, 20.0])
    assert allclose(expected, expected + torch.tensor([0.0, 3e-5]), 1e-5, RTOL)  # 3e-5 at 20: rounding
    assert not allclose(expected, expected + torch.tensor([3e-5, 0.0]), 1e-5, RTOL)  # at 0.5: a mistake
    line = worst_position(expected, expected + torch.tensor([2e-5, 4e-5]), ("dim",), 1e-5, RTOL)
    assert line is not None and "furthest over its tolerance (1.1e-05 there): 2.0e-05 at (dim 0)" in line


def computed_in(base: type, dtype: torch.dtype) -> type:
    """The solution's ``base`` run whole in ``dtype``: every float parameter, buffer and input cast
    (torch.func.functional_call, so gradients reach the float32 weights), the outputs cast back to
    float32, as a learner who wants float64 everywhere writes it."""

    def cast(v):
        return v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v

    def back(out):
        if isinstance(out, torch.Tensor):
            return out.float() if out.is_floating_point() else out
        return type(out)(back(o) for o in out) if isinstance(out, (tuple, list)) else out

    def forward(self, *args, **kwargs):
        if self.__dict__.get("_widened"):  # functional_call's own call of forward: the solution's
            return base.forward(self, *args, **kwargs)
        state = {k: cast(v) for k, v in [*self.named_parameters(), *self.named_buffers()]}
        self.__dict__["_widened"] = True
        try:
            out = functional_call(self, state, tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()})
        finally:
            self.__dict__["_widened"] = False
        return back(out)

    return type(f"{base.__name__}In{str(dtype).removeprefix('torch.')}", (base,), {"forward": forward})


@pytest.mark.parametrize("task, name", [("6.1", "BertLayer"), ("6.2", "BertEncoder"), ("6.4", "BertModel")])
def test_a_layer_and_a_whole_model_in_float64_pass_every_check(task, name, capsys):
    """Through six layers HF's float32 drifts from the exact answer (2.9 layer tolerances at a
    padding token of hidden_states[5]): a stack's tolerance is six layers'."""
    check(task, computed_in(NB06[name], torch.float64))
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "task, name, dtype",
    [("6.1", "BertLayer", torch.float16), ("6.4", "BertModel", torch.bfloat16)],
    ids=["layer-float16", "model-bfloat16"],
)
def test_a_layer_and_a_whole_model_in_half_precision_fail_naming_it(task, name, dtype):
    words = str(dtype).removeprefix("torch.")
    with pytest.raises(CheckFailed, match=rf"every value is a {words} number(?s:.*)compute in float32") as err:
        check(task, computed_in(NB06[name], dtype), upto="values")
    assert err.value.cause == "values", str(err.value)


@pytest.mark.parametrize("rtol", [0.0, RTOL])
@pytest.mark.parametrize("expected_dtype", [torch.float32, torch.float64, torch.int64])
@pytest.mark.parametrize("got_dtype", [torch.float32, torch.float64, torch.float16])
def test_closeness_is_its_formula_to_the_last_bit(rtol, expected_dtype, got_dtype):
    """``closeness`` reuses its temporaries in place for speed: what it returns must be the
    formula it stands for, ``max |got - expected| / (atol + rtol |expected|)``, bit for bit (the
    tolerance sweep's margins are read off it), NaN for a NaN, and ``expected`` left as it was."""
    from bertlab.checks.compare import closeness

    generator = torch.Generator().manual_seed(0)
    expected = (torch.randn(4, 300, generator=generator) * 5).to(expected_dtype)
    got = (expected.float() + 1e-3 * torch.randn(4, 300, generator=generator)).to(got_dtype)
    kept, atol = expected.clone(), 1e-4
    diff = (got.float() - expected).abs()
    # Without rtol the one division is Python's, after the reduction.
    formula = float((diff / (atol + rtol * expected.abs())).max()) if rtol else float(diff.max()) / atol
    assert closeness(expected, got.requires_grad_(got.is_floating_point()), atol, rtol) == formula
    assert torch.equal(expected, kept)
    got = got.detach().clone()
    got[1, 7] = float("nan")
    assert math.isnan(closeness(expected, got, atol, rtol))
