"""Dropout judged by what HF's draws are, whatever the layout or the pieces a learner drops in.

HF's dropout keeps each element of a tensor on its own, with probability 1 - p, and scales the
kept ones by 1 / (1 - p). A right learner's module may drop the same elements in another memory
layout (attention weights computed sequence-first, ``(T, T, B, heads)``, or with batch and heads
merged), or in pieces (chunks of tokens, one head at a time, a loop over tokens): torch's
generator then draws other masks, yet the dropout is HF's. A wrong one may draw one mask and
share it over rows ("locked" dropout: one mask per sentence for every position, one mask for every
sentence and head), which no layout of HF's draws gives.

So a check runs HF's module first under ``recording()``: each dropout call draws an independent
keep-mask per element from a fixed generator and is recorded with its input. The learner's
module then runs under ``replaying(recorded)``: each dropout call *locates* the tensor it is
given among the recorded inputs, by value (the same activations, up to rounding), through any
permutation or merging of axes and as any contiguous piece of them, and applies the recorded
mask of exactly those elements. Right code in any layout or split gets HF's mask element by
element; a mask shared over rows is applied to a tensor found nowhere in HF's (a tensor of ones,
one row of the activations), gets a mask of its own, and its output differs from HF's.

Every way into torch's dropout goes through the names patched here: ``nn.Dropout`` and
``nn.functional.dropout`` call ``torch._VF.dropout`` (HF's attention calls the latter), and
``torch.dropout`` is the same kernel under another name. ``tests/test_checks_split_work.py``
fails if torch routes one of them elsewhere.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import torch

SEED = 0
_NAMES = ("dropout", "dropout_")  # out of place, in place
# Matching a piece of activations with HF's: the values agree to rounding (a right module computes
# them in another order: a matmul on a chunk of rows sums alike only to float32 rounding of its
# largest terms, so the tolerance scales with the tensor's largest value, not each element's) and
# differ by far more anywhere else.
ATOL, RTOL = 1e-5, 1e-4
# Positions of a piece that narrow down where it starts before it is compared whole.
ANCHORS = 32


@dataclass
class Drawn:
    """One dropout call of HF's module: what it was given, and which elements it kept."""

    given: torch.Tensor  # any shape, detached, float32
    keep: torch.Tensor  # bool, the same shape
    p: float


_state: dict = {"recorded": None}  # the judge's recorded draws while a check replays them


def active() -> list[Drawn] | None:
    """The draws the learner's calls replay while a check asks for it, else None."""
    return _state["recorded"]


@contextlib.contextmanager
def replaying(recorded: list[Drawn]) -> Iterator[None]:
    """Inside, ``harness.invoke`` replays ``recorded`` in the learner's process (see ``patched``)."""
    saved = _state["recorded"]
    _state["recorded"] = recorded
    try:
        yield
    finally:
        _state["recorded"] = saved


def _apply(x: torch.Tensor, keep: torch.Tensor, p: float, in_place: bool) -> torch.Tensor:
    scale = keep.to(x.dtype) / (1 - p)  # (x's shape)
    return x.mul_(scale) if in_place else x * scale


def _layouts(shape: torch.Size) -> Iterator[tuple[int, ...]]:
    """Orders of ``shape``'s axes, the identity first (most right code keeps HF's layout)."""
    return itertools.permutations(range(len(shape)))  # lexicographic: the identity comes first


def locate(x: torch.Tensor, drawn: list[Drawn], index: ValueIndex | None = None) -> torch.Tensor | None:
    """The keep-mask of ``x``'s elements (x's shape) where ``x`` is a piece of one recorded input.

    A piece: some order of the recorded tensor's axes, flattened, holds ``x``'s values, in some
    order of ``x``'s own axes, as one contiguous run. That covers a permuted layout, merged or
    split axes (``(B * heads, T, T)``), one head of many, a chunk of tokens. None where no
    recorded input holds ``x``. ``index`` (one per replay) skips, before any layout is tried, the
    recorded inputs that lack some of ``x``'s values, and tries first the one after the last found.
    """
    values = x.detach().float()
    if values.numel() == 0:
        return None
    index = index or ValueIndex(drawn)
    for d in index.likely_first():
        if values.numel() > d.given.numel():
            continue
        tolerance = ATOL + RTOL * float(d.given.abs().max())
        if not index.may_hold(d, values, tolerance):
            continue
        theirs_flat = [(theirs, d.given.permute(theirs).reshape(-1)) for theirs in _layouts(d.given.shape)]  # (N,)
        for mine in _layouts(values.shape):
            flat = values.permute(mine).reshape(-1)  # (n,)
            for theirs, hf_flat in theirs_flat:
                start = _offset(flat, hf_flat, tolerance)
                if start is not None:
                    index.found(d)
                    keep = d.keep.permute(theirs).reshape(-1)[start : start + flat.numel()]
                    inverse = [mine.index(i) for i in range(len(mine))]
                    return keep.reshape([values.shape[i] for i in mine]).permute(inverse)
    return None


class ValueIndex:
    """The recorded inputs' values, sorted once, so that a tensor none of them holds costs a few
    lookups instead of a search through every order of their axes (the search is what costs:
    a layer's attention weights have 576 pairs of axis orders with the learner's)."""

    def __init__(self, drawn: list[Drawn]):
        self.drawn = drawn
        self.sorted: dict[int, torch.Tensor] = {}
        self.after = 0  # right code drops in HF's order: the next call is most likely the next draw

    def likely_first(self) -> list[Drawn]:
        return self.drawn[self.after :] + self.drawn[: self.after]

    def found(self, d: Drawn) -> None:
        self.after = next(i for i, one in enumerate(self.drawn) if one is d) + 1

    def may_hold(self, d: Drawn, values: torch.Tensor, tolerance: float) -> bool:
        """Whether each of a few of ``values`` (the largest among them) is one of ``d``'s, to
        ``tolerance``: false means no layout of ``d`` holds ``values``."""
        if id(d) not in self.sorted:
            self.sorted[id(d)] = d.given.reshape(-1).sort().values  # (N,)
        ordered = self.sorted[id(d)]
        flat = values.reshape(-1)  # (n,)
        picks = torch.linspace(0, flat.numel() - 1, min(flat.numel(), ANCHORS)).long()
        wanted = torch.cat([flat[picks], flat[flat.abs().argmax()].reshape(1)])  # (k,)
        at = torch.searchsorted(ordered, wanted).clamp(1, ordered.numel() - 1) if ordered.numel() > 1 else None
        if at is None:
            return bool(((ordered - wanted).abs() <= tolerance).all())
        nearest = torch.minimum((ordered[at] - wanted).abs(), (ordered[at - 1] - wanted).abs())
        return bool((nearest <= tolerance).all())


def _offset(flat: torch.Tensor, hf_flat: torch.Tensor, tolerance: float) -> int | None:
    """Where ``flat`` (n,) lies in ``hf_flat`` (N,) as one contiguous run, to ``tolerance``; or None.

    Every start the largest value allows is narrowed by a few more positions at once (attention
    weights of a random model are all near 1 / T: one value alone allows thousands of starts),
    and what is left is compared whole.
    """
    n, total = flat.numel(), hf_flat.numel()
    anchor = int(flat.abs().argmax())
    starts = (hf_flat - flat[anchor]).abs().le(tolerance).nonzero().flatten() - anchor  # (candidates,)
    starts = starts[(starts >= 0) & (starts <= total - n)]
    for at in torch.linspace(0, n - 1, min(n, ANCHORS)).long().tolist():
        if starts.numel() == 0:
            return None
        starts = starts[(hf_flat[starts + at] - flat[at]).abs() <= tolerance]
    for start in starts.tolist():
        if bool(((hf_flat[start : start + n] - flat).abs() <= tolerance).all()):
            return start
    return None


def _own_mask(x: torch.Tensor, p: float) -> torch.Tensor:
    """For a tensor found in none of HF's draws: a mask of its own (x's shape), from its shape."""
    return torch.rand(x.shape, generator=torch.Generator().manual_seed(SEED + 1)) >= p


@contextlib.contextmanager
def _patched(dropout) -> Iterator[None]:
    """Every torch dropout entry point of this process calls ``dropout(x, p, in_place)`` in train mode."""

    def out_of_place(x: torch.Tensor, p: float, train: bool) -> torch.Tensor:
        return dropout(x, p, False) if train and p > 0 else x

    def in_place(x: torch.Tensor, p: float, train: bool) -> torch.Tensor:
        return dropout(x, p, True) if train and p > 0 else x

    replacements = {"dropout": out_of_place, "dropout_": in_place}
    saved = [(owner, name, vars(owner).get(name)) for owner in (torch._VF, torch) for name in _NAMES]
    try:
        for owner, name, _ in saved:
            setattr(owner, name, replacements[name])
        yield
    finally:
        for owner, name, value in saved:
            if value is None:
                delattr(owner, name)  # torch._VF finds its kernels by __getattr__
            else:
                setattr(owner, name, value)


@contextlib.contextmanager
def recording() -> Iterator[list[Drawn]]:
    """Inside, every dropout keeps each element independently (fixed generator) and is recorded."""
    generator = torch.Generator().manual_seed(SEED)
    drawn: list[Drawn] = []

    def draw(x: torch.Tensor, p: float, in_place: bool) -> torch.Tensor:
        keep = torch.rand(x.shape, generator=generator) >= p  # (x's shape): each element on its own
        drawn.append(Drawn(x.detach().float().clone(), keep, p))
        return _apply(x, keep, p, in_place)

    with _patched(draw):
        yield drawn


class SmallKept(list):
    """HF's draws, replayed with one change: a tensor found nowhere among them and smaller than
    each of them is kept whole instead of getting a mask of its own.

    A module whose output changes under this replay drops such a tensor, and broadcasts its mask
    over the rest: a mask shared over rows ("locked" dropout), which the dropout check names.
    """


def _smaller_than_hf(x: torch.Tensor, drawn: list[Drawn]) -> bool:
    return bool(drawn) and all(x.numel() < d.given.numel() for d in drawn)


@contextlib.contextmanager
def patched(recorded: list[Drawn]) -> Iterator[None]:
    """Inside, every dropout applies the recorded mask of the elements it is given (learner's side)."""

    indexes: dict[float, ValueIndex] = {}

    def replay(x: torch.Tensor, p: float, in_place: bool) -> torch.Tensor:
        same_p = [d for d in recorded if d.p == p]
        if p not in indexes:
            indexes[p] = ValueIndex(same_p)
        keep = locate(x, same_p, indexes[p])
        if keep is None:
            whole = isinstance(recorded, SmallKept) and _smaller_than_hf(x, same_p)
            keep = torch.ones(x.shape, dtype=torch.bool) if whole else _own_mask(x, p)
        return _apply(x, keep, p, in_place)

    with _patched(replay):
        yield
