"""Task 1: the pieces of a BertLayer, then one whole layer, in pure numpy.

- Task 1.1 ``softmax(x, axis=-1)``, numerically stable.
- Task 1.2 ``layer_norm(x, weight, bias, eps)``, biased variance.
- Task 1.3 ``gelu(x)``, the exact erf form.
- Task 1.4 ``linear(x, weight, bias)``, PyTorch's weight layout (out, in).
- Task 1.5 ``bert_layer_forward(hidden_states, attention_mask, params, config)``.

These are functions over numpy arrays, not modules, so each task is a small ``Task`` of its own:
the learner's function gets numpy copies of torch tensors (the pretrained model's captured
activations, or random arrays) and its result is compared with torch's own function on the same
numbers. Known mistakes are simulated in ``bertlab.diagnose.numpy_bert``.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from bertlab import diagnose
from bertlab.checks.compare import allclose, worst_position
from bertlab.checks.framework import CheckFailed, Context, Task
from bertlab.checks.harness import AsArray, in_learner_process
from bertlab.diagnose import numpy_bert as flawed  # registers the mistakes
from bertlab.masks import additive_mask, random_padding

TOKENS = ("batch", "token", "dim")
PROBS = ("batch", "head", "query", "key")


@dataclass
class Case:
    """One call of the learner's function and what it must return.

    Attributes:
        inputs: argument name -> torch tensor (or dict of tensors, or plain value), in the
            function's argument order. The learner gets numpy copies; the known-mistake
            simulations get the tensors themselves.
        expected: what torch (or HF's module) returns on the same numbers.
        against: completes "values differ from ...".
        dims: a name per dimension of the output.
        hint: an extra line of feedback when the values differ and no known mistake explains it.
        magnitude: for inputs far from 0 (around 1e4), their size: a correct float32 result is
            then only as exact as float32 is at that size (see ``float32_rtol``).
    """

    inputs: dict
    expected: torch.Tensor
    against: str
    dims: tuple[str, ...]
    hint: str | None = None
    magnitude: float | None = None


def _to_numpy(value, array=lambda tensor: tensor.numpy()):
    """``value`` with its tensors (also inside a dict) made numpy arrays by ``array``.

    The harness hands the learner its own copies; this only changes torch into numpy. For the
    learner's process, ``array=AsArray`` sends the tensor, which becomes an array over there."""
    if isinstance(value, torch.Tensor):
        return array(value.detach())
    if isinstance(value, dict):
        return {k: _to_numpy(v, array) for k, v in value.items()}
    return value


def _arrays(args: dict) -> dict[str, np.ndarray]:
    """Every numpy array among the arguments, by the name the learner knows it under."""
    found = {}
    for name, value in args.items():
        if isinstance(value, np.ndarray):
            found[f"`{name}`"] = value
        elif isinstance(value, dict):
            found.update({f'`{name}["{k}"]`': v for k, v in value.items() if isinstance(v, np.ndarray)})
    return found


def _close(expected: torch.Tensor, got: torch.Tensor, atol: float, rtol: float) -> bool:
    return bool(torch.isfinite(got).all()) and allclose(expected, got, atol, rtol)


FLOAT32_EPS = float(torch.finfo(torch.float32).eps)


def float32_rtol(magnitude: float) -> float:
    """How far a correct float32 computation on inputs of size ``magnitude`` may be, relatively.

    A float32 number of size M is rounded to within half a step, ``M * eps / 2``. A stable
    softmax on scores around 1e4 subtracts a constant c of that size (the row's maximum, or
    its log-sum-exp ``m + log(sum(exp(x - m)))``), rounded once or twice: every exponent
    moves by up to ``M * eps`` (1.2e-3 at 1e4), and every probability by that factor
    ``exp(M * eps) - 1``. Four times that leaves room for one more rounding, and is still far
    below what wrong code gives there (NaN, inf, or rows that do not sum to 1).
    """
    return 4 * FLOAT32_EPS * magnitude


class NumpyTask(Task):
    """A numpy function checked against torch on captured activations, then on edge cases."""

    stages: tuple[str, ...] = ("shapes", "values", "edge_cases")
    lesson = "01-anatomy"
    tools = "numpy"
    # |got - expected| <= atol + rtol * |expected|, like numpy.allclose. The rtol is needed
    # because numpy and torch sum float32 products in different orders: on `output.dense`,
    # whose outputs reach ~200 in this model's outlier dimensions (one float32 step there is
    # 1.5e-5), a correct numpy `x @ W.T + b` differs from torch by up to 6e-5, i.e. 3e-7 of the
    # value. The smallest known mistake (tanh GELU) moves values by 5e-4.
    atol = 1e-5
    rtol = 1e-5
    output = "output"
    arguments: tuple[str, ...]  # the function's argument names, for messages

    # -- what subclasses provide ------------------------------------------------------------

    def value_cases(self, ctx: Context) -> Iterator[Case]:
        """Cases built from the pretrained model's captured activations, layer by layer."""
        raise NotImplementedError

    def edge_cases(self, ctx: Context) -> Iterator[Case]:
        """Small cases that real activations never exercise (overflow, constant rows, ...)."""
        raise NotImplementedError

    # -- helpers ----------------------------------------------------------------------------

    def function(self, fn):
        if not callable(fn) or isinstance(fn, type):
            self.fail(f'pass your function itself, e.g. check("{self.id}", {self.title}); got {fn!r}')
        return fn

    def call(self, fn, case: Case) -> torch.Tensor:
        """Call ``fn`` on numpy versions of ``case.inputs``; its output as a float32 tensor.

        The harness gives the call its own copies and fails it when it changes one in place.
        """
        args = {k: _to_numpy(v) for k, v in case.inputs.items()}
        sent = [_to_numpy(v, AsArray) for v in case.inputs.values()] if in_learner_process(fn) else args.values()
        with np.errstate(all="ignore"):  # overflow or 0/0 shows up as inf/NaN in the message instead
            try:
                out = self.call_learner(f"{self.title}({', '.join(self.arguments)})", fn, *sent)
            except CheckFailed as err:
                raise CheckFailed(self._argument_names(str(err)), err.mistake, err.values, err.cause) from None
        out = self.as_array(out)
        want = tuple(case.expected.shape)
        if out.shape != want:
            self.fail(
                f"the output has shape {list(out.shape)}, expected {list(want)} ({', '.join(case.dims)}) "
                f"on {case.against}"
            )
        given = {a.dtype for a in _arrays(args).values() if np.issubdtype(a.dtype, np.floating)}
        if given and out.dtype not in given:
            self.fail(
                f"returned an array of dtype {out.dtype} for {' and '.join(sorted(map(str, given)))} input "
                f"({case.against}); return the input's dtype",
                "Something computes in another precision (math.erf through np.vectorize, np.float64 "
                "constants, np.array(..., dtype=float)): cast the result back with `.astype(x.dtype)`.",
            )
        return torch.from_numpy(np.asarray(out, dtype=np.float32))

    def called(self, what: str) -> str:
        """The call line shows the function's name once, then what it received (``what`` is its signature)."""
        return self.title

    def _argument_names(self, message: str) -> str:
        # The learner's function is called positionally: "argument 1" is its first parameter, `x`.
        def name(match):
            index = int(match.group(1)) - 1
            return f"`{self.arguments[index]}" if index < len(self.arguments) else match.group(0)

        return re.sub(r"`argument (\d+)", name, message)

    def as_array(self, out) -> np.ndarray:
        if isinstance(out, torch.Tensor):
            self.fail(
                "returned a torch.Tensor; return a numpy array",
                "This task is numpy only: np.exp, np.max, np.mean, `@` on arrays, ... (no torch).",
            )
        if not isinstance(out, np.ndarray):
            self.fail(f"must return a numpy array; got {type(out).__name__}")
        if not np.issubdtype(out.dtype, np.floating):
            self.fail(f"returned an array of dtype {out.dtype}; expected floating-point numbers")
        return out

    def compare(self, expected, got, dims, against, diagnose_with=None, hint=None, rtol=None):
        """The framework's comparison, with a relative tolerance on top of the absolute one.

        Args:
            rtol: the relative tolerance, when not ``self.rtol`` (inputs far from 0).
        """
        rtol = self.rtol if rtol is None else rtol
        for name, want in expected.items():
            have = got[name]
            if _close(want, have, self.atol, rtol):
                continue
            mistake = None
            if diagnose_with is not None:
                mistake = diagnose.diagnose(self.id, *diagnose_with, got, expected)
                mistake = mistake or flawed.diagnose_variants(self.id, diagnose_with[1], got, expected)
            tolerance = f"atol {self.atol:g}" + (f", rtol {rtol:.2g}" if rtol else "")
            self.fail(
                f"values differ from {against} ({tolerance})",
                worst_position(want, have, dims[name]),
                None if mistake else hint,
                mistake=mistake,
            )

    def check_case(self, fn, case: Case) -> None:
        got = self.call(fn, case)
        self.compare(
            {self.output: case.expected},
            {self.output: got},
            {self.output: case.dims},
            case.against,
            (None, case.inputs),
            case.hint,
        )

    # -- the checks, in order ---------------------------------------------------------------

    def check_shapes(self, fn, ctx: Context) -> None:
        self.call(self.function(fn), next(iter(self.value_cases(ctx))))

    def check_values(self, fn, ctx: Context) -> None:
        for case in self.value_cases(ctx):
            self.check_case(self.function(fn), case)

    def check_edge_cases(self, fn, ctx: Context) -> None:
        for case in self.edge_cases(ctx):
            self.check_case(self.function(fn), case)


def _layers(ctx: Context) -> range:
    return range(ctx.model.config.num_hidden_layers)


def _randn(ctx: Context, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=ctx.generator)


def _randint(ctx: Context, low: int, high: int) -> int:
    return int(torch.randint(low, high, (1,), generator=ctx.generator))


def attention_scores(ctx: Context, layer: int) -> torch.Tensor:
    """The pretrained layer's scaled attention scores plus the additive mask, (B, heads, T, T)."""
    module = ctx.model.encoder.layer[layer].attention.self
    call = ctx.corpus.layer(layer, "attention.self")
    hidden_states, mask = call.args[0], call.kwargs["attention_mask"]
    B, T, _ = hidden_states.shape
    with torch.no_grad():
        q, k = (
            m(hidden_states).view(B, T, module.num_attention_heads, -1).transpose(1, 2)
            for m in (module.query, module.key)
        )
        scores = (q @ k.transpose(-1, -2)) * module.scaling  # (B, heads, T, T)
    return scores if mask is None else scores + mask


class SoftmaxTask(NumpyTask):
    id = "1.1"
    title = "softmax"
    arguments = ("x", "axis")

    def value_cases(self, ctx):
        for layer in _layers(ctx):
            scores = attention_scores(ctx, layer)
            yield Case(
                {"x": scores, "axis": -1},
                torch.softmax(scores, dim=-1),
                f"torch.softmax over the keys of the pretrained layer {layer}'s masked attention scores",
                PROBS,
            )

    def edge_cases(self, ctx):
        x = _randn(ctx, 3, 5, 4)
        yield Case(
            {"x": x, "axis": 1},
            torch.softmax(x, dim=1),
            "torch.softmax(x, dim=1) on a (3, 5, 4) array, axis=1",
            ("dim0", "dim1", "dim2"),
            "Normalise along `axis`, the argument, not a fixed axis.",
        )
        big = 1e4 + 10 * _randn(ctx, 2, 3, 6, 6)  # exp(1e4) overflows float32 and float64 alike
        yield Case(
            {"x": big, "axis": -1},
            torch.softmax(big, dim=-1),
            "torch.softmax on scores around 1e4 (exp overflows unless each row's maximum is subtracted)",
            PROBS,
            "Subtract each row's maximum, np.max(x, axis=axis, keepdims=True), before np.exp.",
            magnitude=float(big.abs().max()),
        )
        offsets = torch.tensor([1e4, 0.0, -1e4, 5e3])[:, None]
        spread = _randn(ctx, 4, 7) + offsets  # rows far apart: one maximum for the whole array is not enough
        yield Case(
            {"x": spread, "axis": -1},
            torch.softmax(spread, dim=-1),
            "torch.softmax on rows whose scores lie 1e4 apart",
            ("row", "column"),
            "Subtract each row's own maximum, np.max(x, axis=axis, keepdims=True), not the maximum of the whole array.",
            magnitude=float(spread.abs().max()),
        )

    def check_case(self, fn, case: Case) -> None:
        """On scores around 1e4, what the case is about: finite probabilities, rows summing to 1.

        There float32 itself is no more exact than ``float32_rtol(magnitude)`` (a correct
        log-sum-exp softmax is off by ~5e-4 there), so the comparison with torch allows that.
        """
        if case.magnitude is None:
            return super().check_case(fn, case)
        got = self.call(fn, case)
        want, dims, axis = case.expected, {self.output: case.dims}, case.inputs["axis"]
        rtol = float32_rtol(case.magnitude)
        if not bool(torch.isfinite(got).all()):  # overflow: the comparison shows the NaN or inf
            self.compare({self.output: want}, {self.output: got}, dims, case.against, (None, case.inputs), case.hint)
        if bool((got < 0).any()):
            self.fail(f"negative probabilities on {case.against}", worst_position(want, got, case.dims))
        sums = got.double().sum(axis)
        worst = int((sums - 1).abs().argmax())
        if abs(float(sums.flatten()[worst]) - 1) > rtol + self.atol:
            self.fail(
                f"the output does not sum to 1 along axis {axis} on {case.against} "
                f"(tolerance {rtol + self.atol:.2g}, float32 at |x| ~ {case.magnitude:.0e})",
                f"one row sums to {float(sums.flatten()[worst]):.6g}",
            )
        self.compare(
            {self.output: want}, {self.output: got}, dims, case.against, (None, case.inputs), case.hint, rtol=rtol
        )


def _layer_norm_inputs(ctx: Context, layer: int, part: str) -> tuple[torch.Tensor, Any]:
    """What ``{part}.LayerNorm`` of a pretrained layer normalised: dense(x) + residual, (B, T, H)."""
    module = ctx.model.encoder.layer[layer].get_submodule(part)
    call = ctx.corpus.layer(layer, part)
    with torch.no_grad():
        return module.dense(call.args[0]) + call.args[1], module.LayerNorm


class LayerNormTask(NumpyTask):
    id = "1.2"
    title = "layer_norm"
    arguments = ("x", "weight", "bias", "eps")

    def case(self, x, weight, bias, eps, against, dims=TOKENS, hint=None) -> Case:
        expected = F.layer_norm(x, x.shape[-1:], weight, bias, eps)
        return Case({"x": x, "weight": weight, "bias": bias, "eps": eps}, expected, against, dims, hint)

    def value_cases(self, ctx):
        for layer in _layers(ctx):
            for part in ("attention.output", "output"):
                x, norm = _layer_norm_inputs(ctx, layer, part)
                yield self.case(
                    x,
                    norm.weight.detach(),
                    norm.bias.detach(),
                    ctx.model.config.layer_norm_eps,
                    f"torch's layer_norm on what the pretrained layer {layer}'s {part}.LayerNorm received",
                )

    def edge_cases(self, ctx):
        eps = ctx.model.config.layer_norm_eps
        H = 4  # with few features, dividing the variance by H - 1 instead of H is plain to see
        yield self.case(
            2 * _randn(ctx, 3, 5, H) + 1,
            _randn(ctx, H),
            _randn(ctx, H),
            eps,
            f"torch's layer_norm on rows of {H} features",
        )
        H = 16
        x = _randn(ctx, 5, H)
        x[1], x[3] = 2.5, -0.5  # constant rows: variance exactly 0, so only eps keeps 0 / 0 away
        yield self.case(
            x,
            _randn(ctx, H),
            _randn(ctx, H),
            eps,
            "torch's layer_norm on a batch with constant rows",
            ("row", "dim"),
            "A constant row has variance 0: eps inside the square root keeps it finite.",
        )
        yield self.case(
            0.1 * _randn(ctx, 5, H),
            _randn(ctx, H),
            _randn(ctx, H),
            1e-2,
            "torch's layer_norm with eps=0.01 on rows of variance ~0.01",
            ("row", "dim"),
            "Use the `eps` argument, inside the square root: (x - mean) / sqrt(var + eps).",
        )


class GeluTask(NumpyTask):
    id = "1.3"
    title = "gelu"
    arguments = ("x",)

    def value_cases(self, ctx):
        for layer in _layers(ctx):
            dense = ctx.model.encoder.layer[layer].intermediate.dense
            with torch.no_grad():
                x = dense(ctx.corpus.layer(layer, "intermediate").args[0])  # (B, T, I)
            yield Case(
                {"x": x},
                F.gelu(x),
                f"torch's exact GELU on the pretrained layer {layer}'s intermediate.dense output",
                TOKENS,
            )

    def edge_cases(self, ctx):
        x = torch.cat([torch.linspace(-10, 10, 201), torch.tensor([-30.0, 30.0, 0.0])])
        yield Case(
            {"x": x}, F.gelu(x), "torch's exact GELU on x from -10 to 10, and -30, 30, 0 (a 1-D array)", ("index",)
        )
        x = 5 * _randn(ctx, 3, 7)
        yield Case({"x": x}, F.gelu(x), "torch's exact GELU on a (3, 7) array", ("row", "column"))


# The Linear layers of a BertLayer with the captured call that feeds each. The square ones come
# first: there `x @ W` (no transpose) runs without error, so its wrong numbers can be named.
LINEARS = (
    ("attention.self.query", "attention.self"),
    ("attention.self.key", "attention.self"),
    ("attention.self.value", "attention.self"),
    ("attention.output.dense", "attention.output"),
    ("intermediate.dense", "intermediate"),
    ("output.dense", "output"),
)


class LinearTask(NumpyTask):
    id = "1.4"
    title = "linear"
    arguments = ("x", "weight", "bias")

    def value_cases(self, ctx):
        # Every Linear of the first and the last layer: one line of numpy needs no more, and
        # each pass over a layer's six matmuls costs about a second on a busy CPU.
        for layer in sorted({0, ctx.model.config.num_hidden_layers - 1}):
            for name, part in LINEARS:
                dense = ctx.model.encoder.layer[layer].get_submodule(name)
                x, weight, bias = ctx.corpus.layer(layer, part).args[0], dense.weight.detach(), dense.bias.detach()
                yield Case(
                    {"x": x, "weight": weight, "bias": bias},
                    F.linear(x, weight, bias),
                    f"nn.functional.linear with the pretrained layer {layer}'s {name}",
                    TOKENS,
                )

    def edge_cases(self, ctx):
        x, weight, bias = _randn(ctx, 6, 5), _randn(ctx, 7, 5), _randn(ctx, 7)
        yield Case(
            {"x": x, "weight": weight, "bias": bias},
            F.linear(x, weight, bias),
            "nn.functional.linear with x (6, 5), weight (7, 5): 5 features in, 7 out",
            ("row", "feature"),
            "weight has shape (out_features, in_features): y = x @ weight.T + bias.",
        )
        x, weight, bias = _randn(ctx, 5), _randn(ctx, 3, 5), _randn(ctx, 3)
        yield Case(
            {"x": x, "weight": weight, "bias": bias},
            F.linear(x, weight, bias),
            "nn.functional.linear with a 1-D x (5,) and weight (3, 5)",
            ("feature",),
        )


def _state_dict(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach() for k, v in module.state_dict().items()}


def random_layer_batch(ctx: Context, hidden_size: int) -> tuple[torch.Tensor, torch.Tensor | None, str]:
    """Random hidden states (B, T, H) and one of the mask forms a BertLayer may get (or none)."""
    B, T = _randint(ctx, 1, 5), _randint(ctx, 1, 21)
    hidden_states = _randn(ctx, B, T, hidden_size)
    form = _randint(ctx, 0, 3)
    padding = random_padding(B, T, ctx.generator)
    mask = None if form == 0 else additive_mask(padding, per_query=form == 2)
    padded = int((padding.sum(1) < T).sum()) if mask is not None else 0
    shape = "no mask" if mask is None else f"mask {list(mask.shape)}"
    return hidden_states, mask, f"batch {B}, length {T}, {padded} padded, {shape}"


class BertLayerTask(NumpyTask):
    id = "1.5"
    title = "bert_layer_forward"
    arguments = ("hidden_states", "attention_mask", "params", "config")
    stages = ("shapes", "values", "masks", "config")
    output = "layer_output"
    # A whole layer chains five float32 matmuls, a softmax and two LayerNorms. Measured on the
    # six pretrained layers, a correct numpy float32 layer differs from torch's by at most 3e-6
    # (outputs are LayerNorm'd, |y| <= ~10, so no relative term is needed); 1e-4 leaves room for
    # other valid orders of operations and float32 erf approximations, while the closest known
    # mistake (unbiased variance) is off by 9e-3.
    atol = 1e-4
    rtol = 0.0
    random_trials = 4
    small = {"hidden_size": 24, "num_attention_heads": 2, "intermediate_size": 40}

    def case(self, hidden_states, mask, layer: torch.nn.Module, config, expected, against) -> Case:
        inputs = {
            "hidden_states": hidden_states,
            "attention_mask": mask,
            "params": _state_dict(layer),
            "config": copy.deepcopy(config),
        }
        return Case(inputs, expected, against, TOKENS)

    def value_cases(self, ctx):
        for i in _layers(ctx):
            call = ctx.corpus.layer(i)
            yield self.case(
                call.args[0],
                call.args[1],
                ctx.model.encoder.layer[i],
                ctx.model.config,
                call.output,
                f"the pretrained layer {i}",
            )

    def check_masks(self, fn, ctx: Context) -> None:
        fn = self.function(fn)
        for _ in range(self.random_trials):
            i = _randint(ctx, 0, ctx.model.config.num_hidden_layers)
            hidden_states, mask, description = random_layer_batch(ctx, ctx.model.config.hidden_size)
            layer = ctx.model.encoder.layer[i]
            with torch.no_grad():
                expected = layer(hidden_states, attention_mask=mask)
            self.check_case(
                fn,
                self.case(
                    hidden_states,
                    mask,
                    layer,
                    ctx.model.config,
                    expected,
                    f"HF's pretrained layer {i} on a random batch ({description})",
                ),
            )

    def small_layer(self, ctx: Context, eps: float):
        """A BertLayer (the course's, HF's own bit for bit) on a small config, with random weights drawn
        from the check's generator."""
        from bertlab.bert import BertConfig, BertLayer

        config = BertConfig(**self.small, layer_norm_eps=eps, attn_implementation="eager")
        with torch.random.fork_rng():  # construction draws initial weights; keep the learner's RNG as it was
            layer = BertLayer(config).eval()
        with torch.no_grad():
            for name, p in layer.named_parameters():
                if name.endswith("LayerNorm.weight"):
                    p.copy_(1 + 0.2 * _randn(ctx, *p.shape))
                elif p.dim() == 2:
                    p.copy_(_randn(ctx, *p.shape) / p.shape[1] ** 0.5)
                else:
                    p.copy_(0.2 * _randn(ctx, *p.shape))
        return layer, config

    def check_config(self, fn, ctx: Context) -> None:
        """Every size and eps must come from ``config``: a small random layer, then a large eps."""
        fn = self.function(fn)
        sizes = ", ".join(f"{k} {v}" for k, v in self.small.items())
        layer, config = self.small_layer(ctx, ctx.model.config.layer_norm_eps)
        hidden_states, mask, description = random_layer_batch(ctx, config.hidden_size)
        with torch.no_grad():
            expected = layer(hidden_states, attention_mask=mask)
        self.check_case(
            fn,
            self.case(
                hidden_states,
                mask,
                layer,
                config,
                expected,
                f"HF's BertLayer with a small config ({sizes}) on a random batch ({description})",
            ),
        )

        eps = 1e-2
        wide, wide_config = self.small_layer(ctx, eps)
        wide.load_state_dict(layer.state_dict())
        with torch.no_grad():
            wide_expected = wide(hidden_states, attention_mask=mask)
        case = self.case(
            hidden_states,
            mask,
            wide,
            wide_config,
            wide_expected,
            f"HF's BertLayer with a small config and layer_norm_eps={eps:g}",
        )
        got = self.call(fn, case)
        if not _close(wide_expected, got, self.atol, self.rtol) and _close(expected, got, self.atol, self.rtol):
            self.fail(
                f"the output does not change when config.layer_norm_eps is {eps:g} instead of "
                f"{ctx.model.config.layer_norm_eps:g}",
                "Pass config.layer_norm_eps to both layer_norm calls, and make sure layer_norm adds eps "
                "inside the square root (Task 1.2).",
            )
        self.compare(
            {self.output: wide_expected}, {self.output: got}, {self.output: TOKENS}, case.against, (None, case.inputs)
        )


TASKS = [SoftmaxTask(), LayerNormTask(), GeluTask(), LinearTask(), BertLayerTask()]
