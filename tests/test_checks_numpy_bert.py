"""Task 1's checks: torch's own functions (behind a numpy interface), the solution notebook's layer
and a different but valid numpy implementation pass, on the pretrained and on a tiny random BERT;
known mistakes are named; other failures read well."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from bertlab import capture, reference
from bertlab.checks import CheckFailed, check
from bertlab.checks.numpy_bert import TASKS, float32_rtol
from tests.conftest import solution_namespace


def _t(x):
    return torch.from_numpy(np.asarray(x))


# -- torch behind the learner's numpy signatures, and the solution's layer ---------------------


def torch_softmax(x, axis=-1):
    return torch.softmax(_t(x), dim=axis).numpy()


def torch_layer_norm(x, weight, bias, eps):
    return F.layer_norm(_t(x), x.shape[-1:], _t(weight), _t(bias), eps).numpy()


def torch_gelu(x):
    return F.gelu(_t(x)).numpy()


def torch_linear(x, weight, bias):
    return F.linear(_t(x), _t(weight), _t(bias)).numpy()


# transformers' BertLayer is refused as a shortcut: the right layer is the notebook's own.
solution_layer = solution_namespace("01-numpy-bert")["bert_layer_forward"]

REFERENCE = {
    "1.1": torch_softmax,
    "1.2": torch_layer_norm,
    "1.3": torch_gelu,
    "1.4": torch_linear,
    "1.5": solution_layer,
}


# -- a numpy implementation other than the notebook's, with flaws on demand --------------------


def softmax(x, axis=-1, flaw=None):
    if flaw == "axis-0":
        axis = 0
    if flaw == "no-max":
        exps = np.exp(x)
        return exps / np.sum(exps, axis=axis, keepdims=True)
    top = np.max(x) if flaw == "global-max" else np.max(x, axis=axis, keepdims=True)
    shifted = x - top  # exact near the maximum
    return np.exp(shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True)))  # log-sum-exp


def logsumexp_softmax(x, axis=-1):
    """exp(x - logsumexp(x)), the log-sum-exp rounded to float32 at the size of x: right, and
    off from torch by ~5e-4 on scores around 1e4 (float32's step there is 1e-3)."""
    top = np.max(x, axis=axis, keepdims=True)
    return np.exp(x - (top + np.log(np.sum(np.exp(x - top), axis=axis, keepdims=True))))


def layer_norm(x, weight, bias, eps, flaw=None):
    mean = x.mean(-1, keepdims=True)
    var = (x * x).mean(-1, keepdims=True) - mean * mean  # E[x^2] - E[x]^2: another valid order
    if flaw == "ddof-1":
        var = var * x.shape[-1] / (x.shape[-1] - 1)
    var = np.maximum(var, 0.0)  # the subtraction can dip below 0 by rounding
    if flaw == "no-eps":
        return (x - mean) / np.sqrt(var) * weight + bias
    if flaw == "eps-outside":
        return (x - mean) / (np.sqrt(var) + eps) * weight + bias
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def erf(x):
    """erf from a rational approximation (Abramowitz & Stegun 7.1.26, |error| < 1.5e-7), float32."""
    sign, a = np.sign(x), np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return (sign * (1.0 - poly * np.exp(-a * a))).astype(x.dtype)


def gelu(x, flaw=None):
    if flaw == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    if flaw == "relu":
        return np.maximum(x, 0)
    return 0.5 * x * (1 + erf(x / np.float32(math.sqrt(2))))


def linear(x, weight, bias, flaw=None):
    return (x @ weight if flaw == "no-transpose" else np.einsum("...i,oi->...o", x, weight)) + bias


def layer(hidden_states, attention_mask, params, config, flaw=None):
    B, T, H = hidden_states.shape
    heads = 12 if flaw == "twelve-heads" else config.num_attention_heads
    d = H // heads
    eps = 1e-12 if flaw == "eps-hard-coded" else config.layer_norm_eps
    p = params
    q, k, v = (
        linear(hidden_states, p[f"attention.self.{n}.weight"], p[f"attention.self.{n}.bias"])
        for n in ("query", "key", "value")
    )
    q, k, v = (m.reshape(B, T, heads, d).transpose(0, 2, 1, 3) for m in (q, k, v))  # (B, heads, T, d)
    scores = np.einsum("bhqd,bhkd->bhqk", q, k) * (1.0 if flaw == "no-scaling" else d**-0.5)
    if attention_mask is not None and flaw != "mask-ignored":
        scores = scores + attention_mask
    context = (softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(B, T, H)
    a = layer_norm(
        linear(context, p["attention.output.dense.weight"], p["attention.output.dense.bias"]) + hidden_states,
        p["attention.output.LayerNorm.weight"],
        p["attention.output.LayerNorm.bias"],
        eps,
    )
    i = gelu(
        linear(a, p["intermediate.dense.weight"], p["intermediate.dense.bias"]), "tanh" if flaw == "tanh" else None
    )
    return layer_norm(
        linear(i, p["output.dense.weight"], p["output.dense.bias"]) + a,
        p["output.LayerNorm.weight"],
        p["output.LayerNorm.bias"],
        eps,
    )


def with_flaw(fn, flaw):
    def flawed(*args):
        return fn(*args, flaw=flaw)

    return flawed


NUMPY = {"1.1": softmax, "1.2": layer_norm, "1.3": gelu, "1.4": linear, "1.5": layer}


# -- right code passes --------------------------------------------------------------------------


@pytest.mark.parametrize("task", sorted(REFERENCE))
def test_torch_and_hf_pass(task, capsys):
    check(task, REFERENCE[task])
    assert "checks)" in capsys.readouterr().out


@pytest.mark.parametrize("task", sorted(NUMPY))
def test_another_valid_numpy_implementation_passes(task, capsys):
    """Log-sum-exp softmax, E[x^2] - E[x]^2 variance, a float32 erf approximation, einsum."""
    check(task, NUMPY[task])
    assert "checks)" in capsys.readouterr().out


def test_a_log_sum_exp_softmax_passes_the_overflow_cases(capsys):
    """Its error on scores around 1e4 is float32's, far above 1e-5: the edge cases must allow it."""
    cases = [c for c in TASKS[0].edge_cases(_context()) if c.magnitude is not None]
    assert cases
    for case in cases:
        x = case.inputs["x"].numpy()
        got = torch.from_numpy(logsumexp_softmax(x, case.inputs["axis"]))
        error = ((got - case.expected).abs() / case.expected.clamp_min(1e-30)).max().item()
        assert 1e-5 < error < float32_rtol(case.magnitude), error
    check("1.1", logsumexp_softmax)
    assert "[Task 1.1] softmax passed (3/3 checks)" in capsys.readouterr().out


def _context():
    from bertlab.checks.framework import Context

    return Context.load(0)


def test_nothing_hard_wired_to_the_pretrained_sizes(tiny_bert_dir, monkeypatch):
    monkeypatch.setenv(reference.ENV_VAR, str(tiny_bert_dir))
    for task in sorted(REFERENCE):
        check(task, REFERENCE[task])
        check(task, NUMPY[task])
    assert capture.capture().hidden_states[0].shape[-1] == 32
    with pytest.raises(CheckFailed) as err:
        check("1.5", with_flaw(layer, "no-scaling"))
    assert err.value.mistake == "numpy-layer-no-scaling"


# -- known mistakes are named -------------------------------------------------------------------


@pytest.mark.parametrize(
    "task, flaw, mistake",
    [
        ("1.1", "no-max", "softmax-unstable"),
        ("1.1", "axis-0", "softmax-wrong-axis-numpy"),
        ("1.2", "ddof-1", "unbiased-variance"),
        ("1.2", "no-eps", "layernorm-eps-missing"),
        ("1.2", "eps-outside", "layernorm-eps-outside-sqrt"),
        ("1.3", "tanh", "tanh-gelu-numpy"),
        ("1.3", "relu", "relu-instead-of-gelu-numpy"),
        ("1.4", "no-transpose", "weight-not-transposed"),
        ("1.5", "no-scaling", "numpy-layer-no-scaling"),
        ("1.5", "mask-ignored", "numpy-layer-mask-ignored"),
        ("1.5", "tanh", "tanh-gelu-numpy"),
    ],
)
def test_known_mistakes_are_named(task, flaw, mistake):
    with pytest.raises(CheckFailed) as err:
        check(task, with_flaw(NUMPY[task], flaw))
    assert err.value.mistake == mistake, str(err.value)
    assert f"(known mistake `{mistake}`)" in str(err.value)
    assert str(err.value).startswith(f"[Task {task}] ")


# -- other failures read well -------------------------------------------------------------------


def stub(*args):
    raise NotImplementedError()


def softmax_in_place(x, axis=-1):
    x -= np.max(x, axis=axis, keepdims=True)
    np.exp(x, out=x)
    x /= np.sum(x, axis=axis, keepdims=True)
    return x


def layer_zeroing_a_bias(hidden_states, attention_mask, params, config):
    params["output.dense.bias"][:] = 0.0
    return layer(hidden_states, attention_mask, params, config)


@pytest.mark.parametrize(
    "task, fn, expected",
    [
        ("1.1", stub, r"^\[Task 1\.1\] softmax: not implemented yet: softmax\(x, axis\) raises NotImplementedError"),
        ("1.1", lambda x, axis=-1: torch.softmax(_t(x), dim=axis), r"returned a torch\.Tensor; return a numpy array"),
        ("1.3", lambda x: torch_gelu(x).tolist(), r"must return a numpy array; got list"),
        (
            "1.1",
            softmax_in_place,
            r"softmax\(x, axis\) changed its argument `x` in place\n"
            r"  The caller still needs its inputs",
        ),
        (
            "1.5",
            layer_zeroing_a_bias,
            r"bert_layer_forward\(hidden_states, attention_mask, params, config\) changed its argument "
            r"`params\[\"output.dense.bias\"\]` in place",
        ),
        (
            "1.1",
            with_flaw(softmax, "global-max"),
            r"rows whose scores lie 1e4 apart.*\n  got (nan|inf) at .*\n  Subtract each row's own maximum",
        ),
        (
            "1.4",
            lambda x, weight, bias: x @ weight.T,
            r"values differ from nn\.functional\.linear with the pretrained layer 0's "
            r"attention\.self\.query \(atol 1e-05, rtol 1e-05\)\n  max abs diff",
        ),
        (
            "1.5",
            lambda h, m, p, c: h[:, 0],
            r"the output has shape \[\d+, 384\], expected \[\d+, \d+, 384\] "
            r"\(batch, token, dim\) on the pretrained layer 0",
        ),
        ("1.5", with_flaw(layer, "eps-hard-coded"), r"the output does not change when config\.layer_norm_eps is 0\.01"),
        (
            "1.5",
            with_flaw(layer, "twelve-heads"),
            r"values differ from HF's BertLayer with a small config \(hidden_size 24, "
            r"num_attention_heads 2, intermediate_size 40\)",
        ),
    ],
)
def test_failures_say_what(task, fn, expected):
    with pytest.raises(CheckFailed, match=expected) as err:
        check(task, fn)
    assert err.value.mistake is None


def test_passing_a_class_is_explained():
    with pytest.raises(CheckFailed, match=r'pass your function itself, e\.g\. check\("1\.2", layer_norm\)'):
        check("1.2", torch.nn.LayerNorm)


def float64(fn):
    def upcast(*args):
        return fn(*args).astype(np.float64)

    return upcast


@pytest.mark.parametrize("task", sorted(NUMPY))
def test_a_float64_result_for_float32_input_fails(task):
    """Each function must keep float32 float32 (e.g. np.vectorize(math.erf) returns float64)."""
    with pytest.raises(
        CheckFailed,
        match=r"returned an array of dtype float64 for float32 input .*; return the "
        r"input's dtype\n.*cast the result back with `\.astype\(x\.dtype\)`",
    ) as err:
        check(task, float64(NUMPY[task]))
    assert err.value.mistake is None
    assert str(err.value).startswith(f"[Task {task}] ")


def test_a_gelu_without_the_cast_back_fails():
    def gelu_float64(x):
        return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))

    assert gelu_float64(np.ones(2, np.float32)).dtype == np.float64
    with pytest.raises(CheckFailed, match=r"\[Task 1\.3\] gelu: returned an array of dtype float64"):
        check("1.3", gelu_float64)


def test_captured_activations_survive_in_place_learners():
    """The learner works on copies: an in-place softmax cannot corrupt the capture for later checks."""
    with pytest.raises(CheckFailed):
        check("1.1", softmax_in_place)
    check("1.1", torch_softmax)


def test_the_call_line_shows_what_the_function_received_once():
    """In a graded notebook the arrays cross as ``AsArray``: the call line shows them as arrays,
    and the function's name once (it showed the wrapper's name and the arguments twice)."""
    from bertlab.checks.harness import AsArray, describe_call

    assert describe_call((AsArray(torch.zeros(2, 7, 384)), AsArray(torch.zeros(384)), 1e-12), {}) == (
        "(float32 array [2, 7, 384], float32 array [384], 1e-12)"
    )

    def raises(x, weight, bias, eps):
        raise ValueError("no")

    with pytest.raises(CheckFailed) as err:
        check("1.2", raises, upto="values")
    assert "the call: layer_norm(float32 array [" in str(err.value), str(err.value)
