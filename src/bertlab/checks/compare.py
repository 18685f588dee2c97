"""Compare a learner's tensor with the expected one and describe the worst position."""

from __future__ import annotations

import torch


def worst_position(expected: torch.Tensor, got: torch.Tensor, dims: tuple[str, ...]) -> str | None:
    """None when ``got`` is within tolerance, else a line naming the worst element.

    Args:
        expected, got: tensors of the same shape.
        dims: a name per dimension, e.g. ``("batch", "token", "dim")``.
    """
    got = got.detach().float()
    diff = (got - expected).abs()
    bad = ~torch.isfinite(got)
    if bad.any():
        index = tuple(int(i) for i in bad.nonzero()[0])
        return f"got {got[index].item()} at {_where(index, dims)}: expected {expected[index].item():.4g}"
    flat = int(diff.argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), diff.shape))
    return (
        f"max abs diff {diff[index].item():.1e} at {_where(index, dims)}: "
        f"expected {expected[index].item():.4g}, got {got[index].item():.4g}"
    )


def allclose(expected: torch.Tensor, got: torch.Tensor, atol: float) -> bool:
    got = got.detach().float()
    return bool(torch.isfinite(got).all()) and bool(torch.allclose(got, expected, atol=atol, rtol=0))


def _where(index: tuple[int, ...], dims: tuple[str, ...]) -> str:
    names = dims if len(dims) == len(index) else tuple(f"dim{i}" for i in range(len(index)))
    return "(" + ", ".join(f"{n} {i}" for n, i in zip(names, index)) + ")"
