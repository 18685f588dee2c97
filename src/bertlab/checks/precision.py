"""Whether a learner's output was computed in half precision (float16, bfloat16), to say so.

Half precision keeps 11 (float16) or 8 (bfloat16) bits of a number where float32 keeps 24: its
rounding alone moves a layer's modules by hundreds (float16) to thousands (bfloat16) of times
the values tolerance (lesson 6 measures each), so such code fails however right its formula is.
"values differ" would send the learner looking for a wrong formula; the message names the
precision instead. Two kinds of evidence, neither a
guess from the size of the difference (a wrong formula can differ by as much):

- every value of the output is a float16 (bfloat16) number, as after ``.half()`` and a cast back
  (``output_precision``);
- a tensor of that dtype appears in the module's forward, or among its weights: the forward is
  run once more, where the module lives, under a watch of torch's calls (``module_precision``).
"""

from __future__ import annotations

import math

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from bertlab.checks.harness import invoke_beside

HALF = (torch.float16, torch.bfloat16)


def name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def advice(dtype: torch.dtype) -> str:
    """What the message says of a computation in ``dtype`` (a half-precision one)."""
    bits = round(-math.log2(torch.finfo(dtype).eps)) + 1  # the stored bits and the implicit one
    return (
        f"{name(dtype)} keeps {bits} bits of each number where float32 keeps 24, so its rounding "
        f"alone is far over the tolerance: compute in float32 (no .half(), .bfloat16() or autocast)."
    )


def output_precision(got: torch.Tensor) -> torch.dtype | None:
    """The half-precision dtype in which every value of ``got`` (float32, not all 0 or 1) lies
    exactly, or None: the mark of a result computed in it and cast back."""
    if got.dtype != torch.float32 or got.numel() == 0:
        return None
    values = got.detach()
    values = values[torch.isfinite(values)]
    # A few exact numbers (0, 1, small integers: a ReLU's zeros) lie in every format.
    if int((values != values.round()).sum()) < 16:
        return None
    # bfloat16 first: its 8 bits are a subset of float16's 11 wherever float16 reaches, so a
    # bfloat16 result without tiny values (a LayerNorm's output) is all float16 numbers too,
    # while a float16 result is almost never all bfloat16 numbers.
    for dtype in (torch.bfloat16, torch.float16):
        if bool((values.to(dtype).float() == values).all()):
            return dtype
    return None


def module_precision(module, inputs: dict) -> torch.dtype | None:
    """The half-precision dtype seen among ``module``'s weights or in its forward on ``inputs``,
    or None (None too when the watch could not run). Runs in the learner's process when the
    module lives there."""
    outcome = invoke_beside(module, watch_precision, (module, inputs))
    dtype = outcome.value if outcome.kind == "ok" else None
    return getattr(torch, dtype) if dtype in {name(d) for d in HALF} else None


class _Watch(TorchFunctionMode):
    """Notes the first half-precision tensor any torch call returns."""

    def __init__(self):
        super().__init__()
        self.seen: torch.dtype | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.seen is None:
            self.seen = next(
                (t.dtype for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.dtype in HALF), None
            )
        return out


def watch_precision(module, inputs: dict) -> str | None:
    """The name of the first half-precision dtype among ``module``'s weights or in its forward."""
    for tensor in [*module.parameters(), *module.buffers()]:
        if tensor.dtype in HALF:
            return name(tensor.dtype)
    watch = _Watch()
    with torch.no_grad(), watch:
        module(**inputs)
    return name(watch.seen) if watch.seen is not None else None
