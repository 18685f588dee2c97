"""Compare a learner's tensor with the expected one and describe the worst position."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

FLOAT32_EPS = float(torch.finfo(torch.float32).eps)
# The relative part of every module task's values tolerance, |got - expected| <= atol + RTOL |expected|.
# Right code that sums in another order than HF's (float64 and cast back, einsum, addmm on the
# flattened tokens, another CPU's kernels or thread count) lands elsewhere among float32's numbers,
# by an amount that grows with the size of the value: at 20.3 in BertIntermediate's output, HF's
# float32 answer is itself 1.6e-5 from the exact one, over an absolute 1e-5 alone. Sixteen times
# float32's relative precision keeps the farthest such form measured within half of the tolerance,
# and PyTorch's default LayerNorm eps, the smallest known mistake at large values, above twice
# it (tests/tolerance_sweep.py records both margins). Half precision is 8192 (float16) and
# 65536 (bfloat16) times as coarse: it fails, and the message names it (``checks.precision``).
RTOL = 16 * FLOAT32_EPS


def worst_position(
    expected: torch.Tensor, got: torch.Tensor, dims: tuple[str, ...], atol: float = 0.0, rtol: float = 0.0
) -> str | None:
    """None when ``got`` is within tolerance, else a line naming the worst element.

    Args:
        expected, got: tensors of the same shape.
        dims: a name per dimension, e.g. ``("batch", "token", "dim")``.
        atol, rtol: the tolerance compared with, ``atol + rtol |expected|``: with an ``rtol``, the
            element furthest over its own tolerance is named too, when it is not the largest
            difference (a large value may differ by more and still be within its tolerance).
    """
    got = got.detach().float()
    diff = (got - expected).abs()
    bad = ~torch.isfinite(got)
    if bad.any():
        index = tuple(int(i) for i in bad.nonzero()[0])
        return f"got {got[index].item()} at {_where(index, dims)}: expected {expected[index].item():.4g}"
    flat = int(diff.argmax())
    line = f"max abs diff {_at(flat, expected, got, dims)}"
    if rtol:
        tolerance = atol + rtol * expected.abs()
        over = int((diff / tolerance).argmax())
        if over != flat:
            line += f"; furthest over its tolerance ({tolerance.flatten()[over].item():.1e} there): "
            line += _at(over, expected, got, dims)
    return line


def _at(flat: int, expected: torch.Tensor, got: torch.Tensor, dims: tuple[str, ...]) -> str:
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), expected.shape))
    diff = (got[index] - expected[index]).abs()
    return (
        f"{diff.item():.1e} at {_where(index, dims)}: "
        f"expected {expected[index].item():.4g}, got {got[index].item():.4g}"
    )


def non_finite(outputs: dict, dims: dict, order: list[str] | None = None) -> str | None:
    """None when every output is finite, else a line saying where NaN (or inf) first appears.

    Args:
        outputs: output name -> the learner's tensor.
        dims: output name -> a name per dimension.
        order: the outputs' names in the order the computation makes them (HF's attention makes
            its probabilities before the context they weight); default: ``outputs``' order. The
            first output with a NaN is where to look: the later ones inherit it.
    """
    found = []
    for name in order or list(outputs):
        value = outputs.get(name)
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            continue
        bad = ~torch.isfinite(value.detach())
        if bad.any():
            index = tuple(int(i) for i in bad.nonzero()[0])
            what = "NaN" if bool(value.detach().isnan().any()) else "inf"
            found.append(
                f"`{name}` ({int(bad.sum())} of {value.numel()} values {what}, the first at "
                f"{_where(index, dims.get(name, ()))})"
            )
    if not found:
        return None
    later = f"; then in {', '.join(found[1:])}" if len(found) > 1 else ""
    return f"NaN or inf first appears in {found[0]}{later}."


def close_where_finite(got: torch.Tensor, wrong: torch.Tensor, expected: torch.Tensor, atol: float) -> bool:
    """Whether ``got`` (which holds NaN or inf) is what the mistake that gives ``wrong`` gives.

    Where a mistake overflows (a mask multiplied with the scores: score x float32's min) depends
    on the order of the learner's operations: NaN lands elsewhere than in the simulation, and an
    exact match is hopeless. The evidence kept: wherever both are finite they agree, and there the
    mistake changes a tenth of the output at least (a few finite values agreeing by chance prove
    nothing).
    """
    if got.shape != wrong.shape or got.shape != expected.shape:
        return False
    got, wrong = got.detach().float(), wrong.detach().float()
    both = torch.isfinite(got) & torch.isfinite(wrong)
    if not both.any() or bool(torch.isfinite(got).all()):
        return False
    near = lambda a, b: (a - b).abs() <= atol + atol * b.abs()  # noqa: E731
    changed = ~torch.isfinite(wrong) | ~near(wrong, expected)  # where the mistake acts
    return bool(near(got[both], wrong[both]).all()) and int(changed[both].sum()) >= got.numel() / 10


def diagnose_non_finite(task_id: str, reference_module, inputs: dict, got: dict, expected: dict):
    """The known mistake of ``task_id`` whose simulation ``got`` (NaN or inf in it) matches where
    both are finite (``close_where_finite``), or None; ``diagnose.diagnose`` asks for NaN in the
    very same places, which a mistake that overflows rarely gives twice."""
    from bertlab import diagnose

    if all(torch.isfinite(v.detach()).all() for v in got.values() if isinstance(v, torch.Tensor)):
        return None
    for mistake in diagnose.for_task(task_id):
        if mistake.outputs is None:
            continue
        with torch.no_grad():
            wrong = mistake.outputs(reference_module, inputs)
        names = [n for n in wrong if n in got and n in expected]
        if names and all(
            close_where_finite(got[n], wrong[n], expected[n], diagnose.MATCH_ATOL)
            if not bool(torch.isfinite(got[n].detach()).all())
            else got[n].shape == wrong[n].shape
            and bool(
                torch.allclose(
                    got[n].detach().float(), wrong[n].float(), atol=diagnose.MATCH_ATOL, rtol=diagnose.MATCH_ATOL
                )
            )
            for n in names
        ):
            return mistake
    return None


def closeness(expected: torch.Tensor, got: torch.Tensor, atol: float, rtol: float = 0.0) -> float:
    """How much of the tolerance ``got`` uses: max of ``|got - expected| / (atol + rtol |expected|)``.

    At most 1 is a match. The one measure every values comparison goes through, so that how
    close the reference solution comes to a tolerance can be read off (tests/tolerance_sweep.py).
    A NaN or an infinity in ``got`` gives NaN or inf, which is never a match.
    """
    if got.numel() == 0:
        return 0.0 if got.shape == expected.shape else math.inf
    # One subtraction, one reduction (torch.allclose takes more passes), and the temporaries
    # reused in place: each new tensor of a large output costs its pages, more than the arithmetic
    # (2.3 to 2.8 times faster on a million values, one thread; the same operations in the same
    # order, so the same bits).
    diff = (got.detach().float() - expected).abs_()  # a new tensor: ours to write in place
    if rtol:
        scale = expected.abs()
        scale = scale.mul_(rtol) if scale.is_floating_point() else scale * rtol
        return float(diff.div_(scale.add_(atol)).max())
    return float(diff.max()) / atol


def allclose(expected: torch.Tensor, got: torch.Tensor, atol: float, rtol: float = 0.0) -> bool:
    return closeness(expected, got, atol, rtol) <= 1  # NaN compares False


def _where(index: tuple[int, ...], dims: tuple[str, ...]) -> str:
    names = dims if len(dims) == len(index) else tuple(f"dim{i}" for i in range(len(index)))
    return "(" + ", ".join(f"{n} {i}" for n, i in zip(names, index, strict=True)) + ")"


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
        if "[" in key
        and key.split("[")[0] == base
        and isinstance(got.get(key), torch.Tensor)
        and tuple(got[key].shape) == tuple(expected[key].shape) == tuple(want.shape)
    ]
    return Difference(
        name, tuple(dims), want.detach().float(), have.detach().float(), layers if len(layers) > 1 else []
    )
