"""The gradients stage: every parameter's and input's gradient equals HF's, in eval mode and in
train mode with HF's dropout masks.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import torch

from bertlab.checks import located_dropout
from bertlab.checks.framework import CheckFailed, Context
from bertlab.checks.harness import (
    gradients_of,
    weighted_sum,
)
from bertlab.checks.module_base import ModuleBase


class GradientChecks(ModuleBase):
    """Stage gradients (``bertlab.checks.stages``)."""

    def call_spec(self, module, inputs: dict) -> tuple[Callable, tuple, dict]:
        """(callable, args, kwargs) that ``self.call(module, inputs)`` makes, for the gradients check."""
        return module, (), inputs

    def raw_order(self, named: dict) -> list:
        """``self.call``'s named outputs in the order the learner's forward returns its tensors."""
        return list(named.values())

    def reference_gradients(
        self,
        ctx: Context,
        layer,
        inputs: dict,
        seed: int,
        located: list | None = None,
        grad_inputs: tuple | None = None,
    ) -> dict:
        """HF's gradients under the learner's loss (``harness.weighted_sum`` of the same outputs).

        With ``located`` (HF's recorded dropout draws), in train mode, every dropout applying them.
        ``grad_inputs``: the inputs whose gradients are asked for (default: the task's).
        """
        grad_inputs = self.grad_inputs if grad_inputs is None else grad_inputs
        hf = self.reference(ctx, layer)  # frozen, in eval mode: its gradients are asked for, not kept
        params = dict(hf.named_parameters())
        kwargs = {k: (v.detach().clone().requires_grad_(True) if k in grad_inputs else v) for k, v in inputs.items()}
        given = [k for k in grad_inputs if k in kwargs]
        hf.requires_grad_(True).train(located is not None)
        try:
            with located_dropout.patched(located).active() if located is not None else contextlib.nullcontext():
                tensors = [t for t in self.raw_order(self.call(hf, kwargs)) if t.is_floating_point()]
            grads = torch.autograd.grad(
                weighted_sum(tensors, seed), [*params.values(), *(kwargs[k] for k in given)], allow_unused=True
            )
        finally:
            hf.requires_grad_(False).eval()
        return {
            "params": dict(zip(params, grads[: len(params)], strict=True)),
            "inputs": dict(zip(given, grads[len(params) :], strict=True)),
            "shapes": [tuple(t.shape) for t in tensors],
        }

    def check_gradients(self, cls, ctx: Context) -> None:
        """In eval mode, under the same weights, inputs and upstream gradient, every parameter's
        and every differentiable input's gradient equals HF's: a value computed right but cut
        from the graph (``.detach()``, ``torch.no_grad()``, ``.data``) fails, named."""
        layer = self.layers(ctx)[0]
        module = self.learner_for(cls, ctx, layer)
        inputs, _ = self.random_inputs(ctx)
        seed = self.gradients_as_hf(module, ctx, layer, inputs, self.grad_inputs, "")
        self.check_train_gradients(module, ctx, layer, inputs, seed)

    def gradients_as_hf(self, module, ctx: Context, layer, inputs: dict, grad_inputs: tuple, how: str) -> int:
        """Fail unless ``module``'s eval-mode gradients on ``inputs`` (its parameters' and those of
        ``grad_inputs``) are HF's; ``how`` says which call. Returns the upstream gradient's seed."""
        fn, args, kwargs = self.call_spec(module, inputs)
        seed = int(torch.randint(2**31, (1,), generator=ctx.generator))
        outcome = gradients_of(fn, args, kwargs, grad_inputs, seed, forbid_shortcuts=self.forbid_shortcuts)
        grads = self.outcome_value(outcome, "forward", args, kwargs)
        if not grads["connected"]:
            self.fail("the output does not depend on any parameter: is forward under torch.no_grad() or detached?")
        params = grads["params"]
        expected = self.reference_gradients(ctx, layer, inputs, seed, grad_inputs=grad_inputs)
        # One pass over each gradient (the word table's is 11.7M numbers): its largest magnitude
        # is 0 where nothing reached it, and NaN or inf where some element is not finite.
        peaks = {n: None if g is None else peak(g) for n, g in params.items()}
        reached = lambda p: p is not None and p > 0  # noqa: E731  (NaN is not > 0: not reached)
        # dead where HF's is not: with inputs_embeds, no gradient reaches the word table in HF's either
        dead = [
            n
            for n, g in params.items()
            if not reached(peaks[n]) and expected["params"].get(n) is not None and reached(peak(expected["params"][n]))
        ]
        dead += [k for k in grad_inputs if k in inputs and grads["inputs"].get(k) is None]
        if dead:
            self.fail(
                f"no gradient reaches {', '.join(dead)}{how}",
                "Every parameter (and the input) must be used in forward, outside torch.no_grad() and .detach().",
            )
        bad = [n for n, p in peaks.items() if p is not None and not math.isfinite(p)]
        bad += [f"the input `{k}`" for k, g in grads["inputs"].items() if g is not None and not math.isfinite(peak(g))]
        if bad:
            self.fail(f"gradients of {', '.join(bad)} are not finite (NaN or inf)")
        how = f"in eval mode, same weights, inputs and upstream gradient{how}"
        try:
            self.compare_gradients(grads, expected, how)
        except CheckFailed:
            if self.values_as_hf(module, ctx, layer, inputs):
                raise  # its hint: the values are right, so the graph is cut
            self.compare_gradients(grads, expected, how, VALUES_DIFFER)
        return seed

    def values_as_hf(self, module, ctx: Context, layer, inputs: dict) -> bool:
        """Whether ``module``'s eval-mode outputs on ``inputs`` are HF's (measured, not assumed: a
        check run alone, ``only="gradients"``, has not run the values check)."""
        with torch.no_grad():
            expected = {k: v.float() for k, v in self.call(self.reference(ctx, layer), inputs).items()}
            got = self.call(module, inputs)
        try:
            self.compare(expected, got, self.outputs, "HF's")
        except CheckFailed:
            return False
        return True

    def compare_gradients(self, grads: dict, expected: dict, how: str, hint: str = "") -> None:
        """Fail where the learner's gradients (``harness.gradients``'s value) differ from HF's;
        ``hint`` says what the difference means (default: the eval-mode one, values being right)."""
        if [tuple(s) for s in grads["shapes"]] != expected["shapes"]:
            self.fail(f"forward returns tensors of shapes {grads['shapes']}; HF's returns {expected['shapes']}")
        params = grads["params"]
        named = [(f"`{n}`", params.get(n), g) for n, g in expected["params"].items()]
        named += [(f"the input `{k}`", grads["inputs"].get(k), g) for k, g in expected["inputs"].items()]
        compared = [(what, got, want, peak(want)) for what, got, want in named if want is not None and got is not None]
        largest = max((size for _, _, _, size in compared), default=0.0)
        for what, got, want, size in compared:
            worst = peak(got - want)
            if not worst <= GRAD_RTOL * size + GRAD_NOISE * largest:  # NaN is not within any tolerance
                self.fail(
                    f"the gradient of {what} differs from HF's (max abs diff {worst:.1e}, largest {size:.1e}), {how}",
                    hint
                    or "The values are right, so something is cut from the graph or computed outside it: "
                    "a .detach(), .data, torch.no_grad() or a number taken out with .item().",
                )

    def check_train_gradients(self, module, ctx: Context, layer, inputs: dict, seed: int) -> None:
        """Backward in train mode too, every dropout applying HF's masks (``located_dropout``).

        The dropout checks run under no_grad, and the eval-mode gradients without dropout: a
        dropout that writes in place into a tensor autograd keeps for backward (the softmax's
        output, with ``inplace=True``) gives HF's values there, yet its backward raises in training.
        """
        hf = self.reference(ctx, layer).train()  # shared and frozen: back to eval mode below
        try:
            with torch.no_grad(), located_dropout.recording() as drawn:
                hf_values = {k: v.float() for k, v in self.call(hf, inputs).items()}
        finally:
            hf.eval()
        if not drawn:  # no dropout in this module: train mode computes what eval mode does
            return
        fn, args, kwargs = self.call_spec(module, inputs)
        outcome = gradients_of(
            fn, args, kwargs, self.grad_inputs, seed, forbid_shortcuts=self.forbid_shortcuts, train=True, located=drawn
        )
        # torch's own words for a saved tensor changed before backward used it
        if outcome.kind == "saved_tensor_changed":
            self.fail(
                "in train mode, backward raises: a tensor autograd saved for the backward pass was changed in place",
                f"at {outcome.where}" if outcome.where else "",
                "Typically dropout written in place on the softmax's output (nn.Dropout(inplace=True), "
                "F.dropout(..., inplace=True), x.mul_(mask)): the softmax's backward needs its output as it "
                "was. Use the out-of-place form: x = self.dropout(x).",
            )
        grads = self.outcome_value(outcome, "forward and backward in train mode", args, kwargs)
        expected = self.reference_gradients(ctx, layer, inputs, seed, located=drawn)
        how = "in train mode, with HF's dropout masks"
        try:
            self.compare_gradients(grads, expected, how, TRAIN_ONLY)
        except CheckFailed:
            if self.train_values_as_hf(module, inputs, drawn, hf_values):
                raise
            self.compare_gradients(grads, expected, how, TRAIN_VALUES_DIFFER)

    def train_values_as_hf(self, module, inputs: dict, drawn: list, hf_values: dict) -> bool:
        """Whether ``module``'s train-mode outputs on ``inputs``, HF's dropout draws ``drawn``
        replayed, are HF's ``hf_values`` (measured, not assumed: a check run alone,
        ``only="gradients"``, has not run the dropout check)."""
        was_training = module.training
        module.train()
        try:
            with torch.no_grad(), located_dropout.replaying(drawn):
                got = self.call(module, inputs)
            self.compare(hf_values, got, self.outputs, "HF's, in train mode with HF's dropout masks")
        except CheckFailed:
            return False
        finally:
            module.train(was_training)
        return True


def peak(t: torch.Tensor) -> float:
    """The largest magnitude in ``t`` (0 for an empty tensor): NaN where some element is NaN, inf
    where one is infinite (``aminmax`` propagates NaN), so it also tells whether ``t`` is finite.

    One read of ``t`` and no copy: ``t.abs().max()`` writes a copy first, and on the word table's
    11.7M gradients took seven times as long (each gradients check takes several such peaks)."""
    if not t.numel():
        return 0.0
    if t.is_complex():  # a learner's complex parameters: aminmax orders real numbers only
        t = t.abs()
    low, high = torch.aminmax(t)
    return max(-float(low), float(high))  # NaN stays NaN: -NaN is NaN, and max keeps its first


# Gradients are sums over the batch and the sequence, taken in another order than HF's: float32
# leaves them agreeing to a few parts in a million of their size. A gradient that is zero in exact
# arithmetic (the key's bias: softmax ignores what all keys share) is float32 noise on both sides,
# of the order of the largest gradient's rounding: hence a floor relative to the largest.
GRAD_RTOL, GRAD_NOISE = 1e-3, 1e-5

# What a wrong gradient means when the forward's values differ too (measured on the same inputs).
VALUES_DIFFER = (
    "Measured: the forward's values on these inputs differ from HF's too, so the gradients differ with "
    "them; the values check says where. Fix the values first."
)

# What a wrong train-mode gradient means when the train-mode values differ too (measured).
TRAIN_VALUES_DIFFER = (
    "Measured: in train mode, with HF's dropout masks, your values on these inputs differ from HF's too, so "
    "the gradients differ with them; the dropout check says where. Fix the values first."
)

# What a gradient wrong in train mode alone measures: the eval-mode gradients and the train-mode
# values (on the same inputs, HF's dropout masks replayed) are HF's, so the backward is not the
# forward's dropout.
TRAIN_ONLY = (
    "Measured: in eval mode these gradients are HF's, and in train mode, with HF's dropout masks, so are "
    "your values; only the train-mode backward differs. Its dropout is not the one the forward applied: a mask "
    "drawn again for backward (torch.utils.checkpoint with preserve_rng_state=False runs the forward "
    "again and draws new masks), or a backward written by hand that does not multiply by the same mask "
    "and 1 / (1 - p)."
)
