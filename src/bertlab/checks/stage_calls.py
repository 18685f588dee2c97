"""The calls stage: one module called again and again answers each call as HF's does."""

from __future__ import annotations

import torch
from torch import nn

from bertlab.checks.framework import CheckFailed, Context
from bertlab.checks.harness import (
    state_digest,
)
from bertlab.checks.stage_calls_refilled import RefilledCallChecks


class CallChecks(RefilledCallChecks):
    """Stage calls (``bertlab.checks.stages``)."""

    def check_calls(self, cls, ctx: Context) -> None:
        """One module called again and again, with other inputs (and another mask) of the same
        shape, answers each call as HF's does. No call may change a parameter or buffer. An
        attribute a call writes (the last probabilities kept "for visualisation", a counter) is
        the learner's own business while every answer is HF's: it fails only when it changes an
        answer, which a fourth call, on new inputs of the same shape, is there to show. Then the
        long run (``stage_calls_refilled``): many calls on the same tensors refilled in place and on
        reused memory, the gradients after them, and other weights loaded."""
        layer = self.layers(ctx)[0]
        module = self.learner_for(cls, ctx, layer)
        hf = self.reference(ctx, layer)
        for _ in range(20):  # a batch with a mask to change, where the task takes one
            first, description = self.random_inputs(ctx)
            mask = first.get("attention_mask", "none taken")
            if not isinstance(mask, torch.Tensor) or mask.shape[-1] > 1:
                if mask is not None:
                    break
        second = other_inputs_of_the_same_shape(first, ctx.generator)
        watched = isinstance(module, nn.Module)
        before = state_digest(module) if watched else {}
        weights = {k for k, v in before.items() if v.startswith("tensor ")}
        last = before
        calls = [
            (first, f"a first call, on {description}"),
            (second, "a second call with other inputs and mask of the same shape (another padding)"),
            (first, f"a third call, on the first call's inputs again ({description})"),
        ]
        kept: set[str] = set()  # attributes a call wrote (the first too): state, if a later answer reads it
        advice = (
            "A module's output depends on its inputs and weights only: keep nothing of a call that a later "
            "call reads (a mask, a cache by shape, a statistic), and never write to a parameter or buffer."
        )
        answers: dict[int, dict] = {}  # HF's, by inputs: the third call's are the first's
        for number, (inputs, which) in enumerate(calls):
            with torch.no_grad():
                if id(inputs) not in answers:
                    answers[id(inputs)] = {k: v.float() for k, v in self.call(hf, inputs).items()}
                expected = answers[id(inputs)]
                got = self.call(module, inputs)
            if watched:
                now = state_digest(module)
                changed = {k for k in last.keys() | now.keys() if last.get(k) != now.get(k)}
                written = sorted(changed & weights)
                if written:
                    self.fail(
                        f"forward writes to {', '.join(f'`self.{k}`' for k in written[:5])}, a parameter or buffer",
                        advice,
                    )
                kept |= changed - weights
                last = now
            try:
                self.compare(expected, got, self.outputs, f"HF's {self.title} on {which}")
            except CheckFailed as err:
                if not kept:
                    raise
                names = ", ".join(f"`self.{k}`" for k in sorted(kept)[:5])
                raise err.adding(
                    f"forward keeps {names} from one call to the next, and a later call's answer changes with it.",
                    advice,
                ) from None
            if number == 2 and kept:  # kept and, so far, never read: once more, on new inputs
                calls.append((other_inputs_of_the_same_shape(second, ctx.generator), "a fourth call, on new inputs"))
        # The long run, on the first sentence alone (each of its calls costs a quarter of a batch's)
        row = {k: (v[:1] if isinstance(v, torch.Tensor) and v.dim() > 1 else v) for k, v in first.items()}
        sets = [row, other_inputs_of_the_same_shape(row, ctx.generator)]
        sets.append(other_inputs_of_the_same_shape(sets[1], ctx.generator))
        self.check_refilled_calls(module, ctx, layer, sets, kept)


def other_inputs_of_the_same_shape(inputs: dict, generator: torch.Generator) -> dict:
    """``inputs`` with new random values of the same shapes and dtypes, and another padding in the mask."""
    from bertlab.masks import additive_mask

    other = {}
    for name, value in inputs.items():
        if not isinstance(value, torch.Tensor):
            other[name] = value
        elif name == "attention_mask":
            padding = value if not value.is_floating_point() else (value[:, 0, -1, :] == 0).long()  # (B, T)
            lengths = padding.sum(-1)
            new = torch.randint(1, padding.shape[-1] + 1, lengths.shape, generator=generator)
            if torch.equal(new, lengths):  # the same padding would test nothing: change one row
                new[0] = lengths[0] - 1 if lengths[0] > 1 else padding.shape[-1]
            padded = (torch.arange(padding.shape[-1])[None, :] < new[:, None]).to(padding.dtype)
            other[name] = (
                padded
                if not value.is_floating_point()
                else additive_mask(padded, value.dtype, per_query=value.shape[-2] > 1)
            )
        elif value.is_floating_point():
            other[name] = torch.randn(value.shape, generator=generator, dtype=value.dtype)
        else:  # ids: new ones in the range the first ones used
            other[name] = torch.randint(
                max(int(value.max()) + 1, 2) if value.numel() else 1,
                value.shape,
                generator=generator,
                dtype=value.dtype,
            )
    return other
