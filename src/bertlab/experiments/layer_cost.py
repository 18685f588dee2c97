"""What one BERT layer costs, part by part, as a function of the sentence length T and width H.

Multiply-adds for one sentence of T tokens (a product of an (n, k) by a (k, m) matrix is n k m):

- the query, key and value projections: 3 T H^2;
- the scores Q K^T, all heads: A T^2 d = T^2 H; the weighted sum P V likewise T^2 H;
- W^O: T H^2; the FFN: 2 T H I (I = 4H in BERT: 8 T H^2).

So the layer does 4 T H^2 + 2 T H I + 2 T^2 H, and the T^2 terms overtake the rest at
T = 2H + I (6H when I = 4H). ``counted`` checks the formula against PyTorch's FLOP counter
on a real layer.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from bertlab.experiments import products

PARTS = ("Q, K, V projections", "scores and weighted sum", "W^O", "FFN")


def multiply_adds(T: int, H: int, I: int) -> dict[str, int]:
    """The formula's multiply-adds of each part for one sentence of ``T`` tokens."""
    return {
        "Q, K, V projections": 3 * T * H * H,
        "scores and weighted sum": 2 * T * T * H,
        "W^O": T * H * H,
        "FFN": 2 * T * H * I,
    }


def crossover(H: int, I: int) -> int:
    """The smallest T at which the T^2 terms are at least the rest: 2 T^2 H >= (4 H^2 + 2 H I) T."""
    return -(-(4 * H * H + 2 * H * I) // (2 * H))  # ceil((4H^2 + 2HI) / 2H) = 2H + I


def _sum(by_module: dict, *suffixes: str) -> int:
    return sum(v for name, v in by_module.items() if name.endswith(suffixes))


def counted(layer: nn.Module, T: int) -> dict[str, int]:
    """The same parts, counted by PyTorch's FLOP counter on ``layer`` (a ``BertLayer``) for one sentence."""
    H = layer.attention.self.query.in_features
    work = products.count(layer, torch.randn(1, T, H))
    projections = _sum(work.by_module, ".self.query", ".self.key", ".self.value")
    return {
        "Q, K, V projections": projections,
        "scores and weighted sum": _sum(work.by_module, ".attention.self") - projections,
        "W^O": _sum(work.by_module, ".attention.output.dense"),
        # ".output.dense" also ends attention's W^O: taken out again
        "FFN": _sum(work.by_module, ".intermediate.dense", ".output.dense")
        - _sum(work.by_module, ".attention.output.dense"),
    }


def fastest_seconds(layer: nn.Module, T: int, repeats: int = 3) -> float:
    """The least wall-clock time of ``repeats`` forward passes of ``layer`` on one sentence of ``T`` tokens."""
    x = torch.randn(1, T, layer.attention.self.query.in_features)
    best = float("inf")
    with torch.no_grad():
        layer(x)  # warm-up
        for _ in range(repeats):
            start = time.perf_counter()
            layer(x)
            best = min(best, time.perf_counter() - start)
    return best
