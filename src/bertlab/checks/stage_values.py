"""The names, shapes, values and masks stages: the learner's module against the pretrained one's
captured activations, then against HF's module on random batches.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from bertlab.checks import precision
from bertlab.checks.framework import CheckFailed, Context
from bertlab.checks.harness import (
    state_shapes,
)
from bertlab.checks.module_base import ModuleBase


class ValueChecks(ModuleBase):
    """Stages names, shapes, values and masks (``bertlab.checks.stages``)."""

    def check_names(self, cls, ctx: Context) -> None:
        module = self.build(cls, ctx)
        mine = state_shapes(module)
        theirs = state_shapes(self.reference(ctx, self.layers(ctx)[0]))
        missing = sorted(set(theirs) - set(mine))
        unexpected = sorted(set(mine) - set(theirs))
        if missing or unexpected:
            self.fail(
                "parameter names differ from HF's, so the pretrained weights cannot load",
                f"missing: {', '.join(missing)}" if missing else "",
                f"unexpected: {', '.join(unexpected)}" if unexpected else "",
                "Use HF's attribute names exactly (see the lesson's diagram).",
            )
        wrong = [f"{k}: expected {list(theirs[k])}, got {list(mine[k])}" for k in theirs if mine[k] != theirs[k]]
        if wrong:
            self.fail("parameter shapes differ from HF's", *wrong)
        self.load(module, ctx, self.layers(ctx)[0])

    def check_shapes(self, cls, ctx: Context) -> None:
        layer = self.layers(ctx)[0]
        inputs, expected = self.captured(ctx, layer)
        with torch.no_grad():
            got = self.call(self.learner_for(cls, ctx, layer), inputs)
        for name, want in expected.items():
            if tuple(got[name].shape) != tuple(want.shape):
                dims = ", ".join(self.outputs[name])
                self.fail(f"`{name}` has shape {list(got[name].shape)}, expected {list(want.shape)} ({dims})")

    def check_values(self, cls, ctx: Context) -> None:
        module = self.build(cls, ctx)
        for layer in self.layers(ctx):
            self.load(module, ctx, layer)
            inputs, expected = self.captured(ctx, layer)
            with torch.no_grad():
                got = self.call(module, inputs)
            with self.naming_precision(module, inputs):
                self.compare(expected, got, self.outputs, self.where(layer), (self.reference(ctx, layer), inputs))

    def check_masks(self, cls, ctx: Context) -> None:
        module = self.build(cls, ctx)
        layers = self.layers(ctx)
        for _ in range(self.random_trials):
            layer = layers[int(torch.randint(len(layers), (1,), generator=ctx.generator))]
            inputs, description = self.random_inputs(ctx)
            hf = self.reference(ctx, layer)
            with torch.no_grad():
                expected = {k: v.float() for k, v in self.call(hf, inputs).items()}
                got = self.call(self.load(module, ctx, layer), inputs)
            with self.naming_precision(module, inputs):
                self.compare(expected, got, self.outputs, f"HF's {self.title} on {description}", (hf, inputs))

    @contextlib.contextmanager
    def naming_precision(self, module, inputs: dict) -> Iterator[None]:
        """A values failure no known mistake explains says so when the module computes in half
        precision: the formula may be right, and float16's rounding alone is over the tolerance."""
        try:
            yield
        except CheckFailed as err:
            if err.cause != "values" or err.mistake is not None:
                raise
            if err.values is not None and precision.output_precision(err.values.got) is not None:
                raise  # the output's own values named the precision already (Task.compare)
            half = precision.module_precision(module, inputs)
            if half is None:
                raise
            raise err.adding(
                f"Your module computes in {precision.name(half)}: {precision.advice(half)}", first=True
            ) from None
