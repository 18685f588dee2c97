"""How far every LayerNorm of the model moves when it uses another epsilon.

The effect of a wrong epsilon depends on the variances that reach each LayerNorm, so one
LayerNorm's number does not speak for the others: this measures all of them on the same batch.

Both LayerNorms are computed in float64 from the recorded float32 inputs, so the effect measured
is the epsilon's, not float32 rounding's: the same on every CPU to many digits. ``float32_step``
gives the scale to compare it with, the spacing of float32 numbers at an output's size.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def float32_step(x: torch.Tensor) -> float:
    """The spacing of float32 numbers at ``x``'s largest magnitude: one unit in the last place.

    A float32 result of that size cannot be closer to the exact one than half of this; a
    rounding difference between two float32 computations is a few of these steps, on any CPU.
    """
    return float(np.spacing(np.float32(x.detach().abs().max().item())))


class Effect(NamedTuple):
    """How far one LayerNorm's output moves, and the float32 step at its size."""

    moved: float  # max abs change over real tokens, computed in float64
    step: float  # float32's spacing at the LayerNorm's largest output over real tokens

    @property
    def steps(self) -> float:
        """The change in float32 steps: the same number wherever it is measured."""
        return self.moved / self.step


def layernorm_inputs(model: nn.Module, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``{LayerNorm name: the input it was given}`` (B, T, H) on one forward pass of ``batch``, in the model's order."""
    inputs: dict[str, torch.Tensor] = {}
    norms = {name: m for name, m in model.named_modules() if isinstance(m, nn.LayerNorm)}
    hooks = [
        m.register_forward_pre_hook(lambda _m, args, name=name: inputs.__setitem__(name, args[0]))
        for name, m in norms.items()
    ]
    try:
        with torch.no_grad():
            model(**batch)
    finally:
        for h in hooks:
            h.remove()
    return {name: inputs[name] for name in norms}


def eps_effect(model: nn.Module, batch: dict, eps: float) -> dict[str, Effect]:
    """Max abs change of each LayerNorm's output over real tokens, run with ``eps`` instead.

    Args:
        model: a ``BertModel``; every ``nn.LayerNorm`` in it is measured on its own recorded input.
        batch: ``input_ids``, ``token_type_ids``, ``attention_mask`` (B, T).
        eps: the epsilon to compare with (PyTorch's default is 1e-5).

    Returns:
        ``{module name: Effect}``, in the model's order.
    """
    real = batch["attention_mask"].bool()  # (B, T)
    norms = {name: m for name, m in model.named_modules() if isinstance(m, nn.LayerNorm)}
    inputs = layernorm_inputs(model, batch)
    effect = {}
    with torch.no_grad():
        for name, ln in norms.items():
            z, weight, bias = inputs[name].double(), ln.weight.double(), ln.bias.double()  # (B, T, H), (H,), (H,)
            moved = F.layer_norm(z, ln.normalized_shape, weight, bias, eps=eps) - F.layer_norm(
                z, ln.normalized_shape, weight, bias, eps=ln.eps
            )  # (B, T, H)
            effect[name] = Effect(moved[real].abs().max().item(), float32_step(ln(inputs[name])[real]))
    return effect
