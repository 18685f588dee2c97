"""Count the matrix products a function runs and the multiply-adds they do, exactly.

Timings on a shared machine vary from run to run; these counts do not. PyTorch's own FLOP
counter (``torch.utils.flop_counter``) gives the work: a product of an (n, k) by a (k, m) matrix
is n k m multiply-adds, which it counts as 2 n k m FLOPs. A dispatch mode counts the product
kernels the function calls: one per ``mm``/``addmm``/``bmm``, however large.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

# The ATen kernels a matrix product reaches on the CPU.
PRODUCT_KERNELS = {"mm", "addmm", "bmm", "baddbmm"}


@dataclass(frozen=True)
class Products:
    """What one call did: how many product kernels ran, and their multiply-adds in total."""

    kernels: int
    multiply_adds: int
    by_module: dict  # multiply-adds per module path (the FLOP counter's breakdown), "Global" = all


class _CountKernels(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.kernels = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in PRODUCT_KERNELS:
            self.kernels += 1
        return func(*args, **(kwargs or {}))


def count(function: Callable, *args) -> Products:
    """Run ``function(*args)`` once without gradients and count its matrix products."""
    with torch.no_grad(), FlopCounterMode(display=False) as flops, _CountKernels() as kernels:
        function(*args)
    by_module = {name: sum(ops.values()) // 2 for name, ops in flops.get_flop_counts().items()}
    return Products(kernels.kernels, flops.get_total_flops() // 2, by_module)
