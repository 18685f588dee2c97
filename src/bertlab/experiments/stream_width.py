"""Why the stream keeps one width: what a projection on the skip path costs, at initialisation.

``x + F(x)`` needs ``F(x)`` to have the shape of ``x``. A block that changed the width would
need a projection on the skip path, ``W_s x + F(x)`` (He, Zhang, Ren & Sun 2016, "Deep Residual
Learning for Image Recognition", projection shortcuts, their option B). This module builds small
randomly initialised stacks of residual blocks, seeded, and compares three kinds of shortcut at
the same width, so that the only difference is the skip path:

- ``"identity"``: ``x`` itself, as in BERT;
- ``"projection"``: a bias-free ``nn.Linear`` with PyTorch's default initialisation;
- ``"orthogonal"``: the same, initialised orthogonal (norm preserving, the most favourable start
  a square projection can have).

Each block is ``Norm(S(x) + F(x))`` with ``F = Linear(d, 4d) -> GELU -> Linear(4d, d)`` and
``Norm`` either a ``LayerNorm`` (Post-LN, BERT's arrangement) or nothing (the plain sum of He et
al.). Measured on random inputs: how much of the input is still in the stream after each block
(cosine to the input, and R^2 of the best linear map from the input), and the gradient that
reaches the blocks' weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

SHORTCUTS = ("identity", "projection", "orthogonal")
NORMS = ("Post-LN", "none")


class Block(nn.Module):
    """One residual block ``Norm(S(x) + F(x))`` mapping width ``d_in`` to ``d_out``.

    Args:
        d_in: input width.
        d_out: output width; the identity shortcut needs ``d_out == d_in``.
        shortcut: one of ``SHORTCUTS``.
        norm: one of ``NORMS``.
    """

    def __init__(self, d_in: int, d_out: int, shortcut: str, norm: str):
        super().__init__()
        if shortcut not in SHORTCUTS or norm not in NORMS:
            raise ValueError(f"shortcut in {SHORTCUTS}, norm in {NORMS}; got {shortcut!r}, {norm!r}")
        if shortcut == "identity" and d_in != d_out:
            raise ValueError(f"an identity shortcut cannot change the width ({d_in} -> {d_out}): use a projection")
        self.ffn = nn.Sequential(nn.Linear(d_in, 4 * d_out), nn.GELU(), nn.Linear(4 * d_out, d_out))
        self.shortcut = None if shortcut == "identity" else nn.Linear(d_in, d_out, bias=False)
        if shortcut == "orthogonal" and self.shortcut is not None:  # an orthogonal one is a projection
            nn.init.orthogonal_(self.shortcut.weight)
        self.norm = nn.LayerNorm(d_out) if norm == "Post-LN" else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = x if self.shortcut is None else self.shortcut(x)  # (N, d_out)
        return self.norm(skip + self.ffn(x))  # (N, d_out)


def stack(width: int, depth: int, shortcut: str, norm: str, seed: int) -> nn.Sequential:
    """``depth`` blocks of one ``width``, initialised from ``seed`` (the global RNG is restored)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return nn.Sequential(*(Block(width, width, shortcut, norm) for _ in range(depth)))


def linear_r2(x: torch.Tensor, y: torch.Tensor) -> float:
    """R^2 of the least-squares affine map from ``x`` (N, d_in) to ``y`` (N, d_out), in float64.

    1 means ``y`` is an affine function of ``x``; 0 means no affine map of ``x`` beats ``y``'s mean.
    """
    xb = torch.cat([x, torch.ones(len(x), 1)], 1).double()  # (N, d_in + 1)
    yd = y.double()
    fit = xb @ torch.linalg.lstsq(xb, yd).solution  # (N, d_out)
    return (1 - ((yd - fit) ** 2).sum() / ((yd - yd.mean(0)) ** 2).sum()).item()


@dataclass(frozen=True)
class Measure:
    """One stack's measures, averaged over seeds.

    Attributes:
        shortcut, norm: the kind of stack.
        cosine: (depth + 1,) mean cosine between each input and the stream after each block
            ([0] is the input itself, 1).
        r2: (depth + 1,) ``linear_r2`` from the input to the stream after each block.
        grad: (depth,) Frobenius norm of the loss gradient of each block's first weight matrix.
        shortcut_parameters: parameters spent on the skip path, over the whole stack.
    """

    shortcut: str
    norm: str
    cosine: torch.Tensor
    r2: torch.Tensor
    grad: torch.Tensor
    shortcut_parameters: int

    @property
    def grad_ratio(self) -> float:
        """First block's gradient over the last block's: below 1, gradients fade towards the input."""
        return (self.grad[0] / self.grad[-1]).item()


def measure(
    shortcut: str, norm: str, width: int = 32, depth: int = 12, samples: int = 512, seeds: Sequence[int] = (0, 1, 2)
) -> Measure:
    """Run random inputs through a fresh stack per seed and average the measures.

    The gradient is that of the mean squared error between the output and random targets, the
    loss of an untrained regression: only its size matters here.
    """
    cosines, r2s, grads = [], [], []
    for seed in seeds:
        net = stack(width, depth, shortcut, norm, seed)
        g = torch.Generator().manual_seed(10_000 + seed)
        x = torch.randn(samples, width, generator=g)  # (N, d)
        target = torch.randn(samples, width, generator=g)  # (N, d)
        streams = [x]
        for block in net:
            streams.append(block(streams[-1]))  # (N, d)
        F.mse_loss(streams[-1], target).backward()
        with torch.no_grad():
            cosines.append(torch.stack([F.cosine_similarity(x, s, dim=-1).mean() for s in streams]))
            r2s.append(torch.tensor([linear_r2(x, s.detach()) for s in streams]))
            grads.append(torch.stack([block.ffn[0].weight.grad.norm() for block in net]))
    extra = sum(p.numel() for b in net for p in (b.shortcut.parameters() if b.shortcut is not None else ()))
    return Measure(
        shortcut, norm, torch.stack(cosines).mean(0), torch.stack(r2s).mean(0), torch.stack(grads).mean(0), extra
    )


def compare(
    width: int = 32, depth: int = 12, samples: int = 512, seeds: Sequence[int] = (0, 1, 2)
) -> dict[tuple[str, str], Measure]:
    """``measure`` for every (shortcut, norm) pair."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # matrices this small: threads cost more than they save
    try:
        return {(s, n): measure(s, n, width, depth, samples, seeds) for n in NORMS for s in SHORTCUTS}
    finally:
        torch.set_num_threads(threads)
