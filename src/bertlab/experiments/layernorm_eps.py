"""How far every LayerNorm of the model moves when it uses another epsilon.

The effect of a wrong epsilon depends on the variances that reach each LayerNorm, so one
LayerNorm's number does not speak for the others: this measures all of them on the same batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def eps_effect(model: nn.Module, batch: dict, eps: float) -> dict[str, float]:
    """Max abs change of each LayerNorm's output over real tokens, run with ``eps`` instead.

    Args:
        model: a ``BertModel``; every ``nn.LayerNorm`` in it is measured on its own recorded input.
        batch: ``input_ids``, ``token_type_ids``, ``attention_mask`` (B, T).
        eps: the epsilon to compare with (PyTorch's default is 1e-5).

    Returns:
        ``{module name: max abs diff}``, in the model's order.
    """
    real = batch["attention_mask"].bool()  # (B, T)
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
    effect = {}
    with torch.no_grad():
        for name, ln in norms.items():
            z = inputs[name]  # (B, T, H)
            moved = F.layer_norm(z, ln.normalized_shape, ln.weight, ln.bias, eps=eps) - ln(z)
            effect[name] = moved[real].abs().max().item()
    return effect
