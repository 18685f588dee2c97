"""Compare a learner's tensor with the expected one and describe the worst position."""

from __future__ import annotations

from dataclasses import dataclass, field

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
    if got.numel() == 0:
        return got.shape == expected.shape
    # One subtraction and one reduction (torch.allclose takes several passes): a NaN or an
    # infinity in ``got`` makes the maximum NaN or inf, which is never within ``atol``.
    return bool((got.detach().float() - expected).abs().max() <= atol)


def _where(index: tuple[int, ...], dims: tuple[str, ...]) -> str:
    names = dims if len(dims) == len(index) else tuple(f"dim{i}" for i in range(len(index)))
    return "(" + ", ".join(f"{n} {i}" for n, i in zip(names, index)) + ")"


@dataclass
class Difference:
    """The tensors of a values comparison that failed, kept for a picture of where they differ.

    Attributes:
        name: the output compared, e.g. ``"context_layer"`` or ``"hidden_states[3]"``.
        dims: a name per dimension of ``expected``.
        expected, got: the compared tensors, detached, float32.
        layers: for an output given per layer (``hidden_states[0]``, ``hidden_states[1]``, ...),
            ``(name, expected, got)`` of every layer of the same shape, in order; else empty.
    """

    name: str
    dims: tuple[str, ...]
    expected: torch.Tensor
    got: torch.Tensor
    layers: list[tuple[str, torch.Tensor, torch.Tensor]] = field(default_factory=list)


def difference(name: str, expected: dict, got: dict, dims: tuple[str, ...]) -> Difference:
    """A ``Difference`` for output ``name`` of the ``expected`` and ``got`` dicts (name -> tensor)."""
    want, have = expected[name], got[name]
    base = name.split("[")[0]
    layers = [
        (key, expected[key].detach().float(), got[key].detach().float())
        for key in expected
        if "[" in key and key.split("[")[0] == base and isinstance(got.get(key), torch.Tensor)
        and tuple(got[key].shape) == tuple(expected[key].shape) == tuple(want.shape)
    ]
    return Difference(name, tuple(dims), want.detach().float(), have.detach().float(),
                      layers if len(layers) > 1 else [])
