"""Multi-head attention seen head by head: per-head weight blocks, OV circuits, projection timings.

Hugging Face stores the query, key and value maps of all heads as one ``nn.Linear(H, H)`` each.
Head ``h`` owns output features ``h*d .. (h+1)*d - 1`` (``d = H / heads``) of each of them, and
input features ``h*d .. (h+1)*d - 1`` of ``attention.output.dense`` (W_O).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


def head_rows(self_attention: nn.Module, head: int) -> slice:
    """The features of ``query``/``key``/``value`` (and of W_O's input) that belong to ``head``."""
    d = self_attention.attention_head_size
    return slice(head * d, (head + 1) * d)


def ov_circuits(attention: nn.Module) -> torch.Tensor:
    """Each head's value-then-output map, W_V^h W_O^h, acting on row vectors.

    A token vector x (1, H) that head h attends to with weight 1 contributes x @ OV[h] to the
    output of ``attention.output.dense`` (biases aside).

    Args:
        attention: a ``BertAttention`` (has ``.self.value`` and ``.output.dense``).

    Returns:
        (heads, H, H); each matrix has rank at most the head size d.
    """
    w_v = attention.self.value.weight  # (H_out = heads*d, H_in)
    w_o = attention.output.dense.weight  # (H, heads*d)
    blocks = []
    for h in range(attention.self.num_attention_heads):
        rows = head_rows(attention.self, h)
        blocks.append(w_v[rows].T @ w_o[:, rows].T)  # (H, d) @ (d, H) -> (H, H)
    return torch.stack(blocks)


def projection_variants(self_attention: nn.Module) -> dict[str, Callable[[torch.Tensor], tuple]]:
    """Three ways to compute the queries, keys and values of every head.

    - ``"per head"``: 3 x heads small products, one (H -> d) matrix per head and role;
    - ``"one matrix per role"``: what ``BertSelfAttention`` does, three (H -> H) products;
    - ``"fused QKV"``: one (H -> 3H) product, split afterwards.

    Each callable maps hidden states (B, T, H) to ``(q, k, v)``, each (B, heads, T, d), and all
    three return the same numbers up to float rounding.
    """
    sa = self_attention
    A, d = sa.num_attention_heads, sa.attention_head_size
    layers = (sa.query, sa.key, sa.value)
    per_head = [
        [(lin.weight[head_rows(sa, h)].contiguous(), lin.bias[head_rows(sa, h)].contiguous()) for h in range(A)]
        for lin in layers
    ]
    w_qkv = torch.cat([lin.weight for lin in layers])  # (3H, H)
    b_qkv = torch.cat([lin.bias for lin in layers])  # (3H,)

    def split(x):  # (B, T, H) -> (B, heads, T, d)
        B, T, _ = x.shape
        return x.view(B, T, A, d).transpose(1, 2)

    def by_head(x):
        return tuple(torch.stack([F.linear(x, w, b) for w, b in role], dim=1) for role in per_head)

    def by_role(x):
        return tuple(split(lin(x)) for lin in layers)

    def fused(x):
        return tuple(split(part) for part in F.linear(x, w_qkv, b_qkv).chunk(3, dim=-1))

    return {"per head": by_head, "one matrix per role": by_role, "fused QKV": fused}


def median_times(functions: dict[str, Callable], *args, rounds: int = 25, warmup: int = 3) -> dict[str, float]:
    """Median wall-clock seconds of each function on ``args``.

    The functions take turns within every round, so a slow patch of the machine hits them all.
    """
    times: dict[str, list[float]] = {name: [] for name in functions}
    with torch.no_grad():
        for round_ in range(warmup + rounds):
            for name, fn in functions.items():
                start = time.perf_counter()
                fn(*args)
                elapsed = time.perf_counter() - start
                if round_ >= warmup:
                    times[name].append(elapsed)
    return {name: statistics.median(t) for name, t in times.items()}
