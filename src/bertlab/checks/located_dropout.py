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

from bertlab.checks import hand_drawn

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
    found = where(x, drawn, index)
    return None if found is None else found[0].keep.reshape(-1)[found[1]]


def where(x: torch.Tensor, drawn: list[Drawn], index: ValueIndex | None = None) -> tuple[Drawn, torch.Tensor] | None:
    """The recorded input ``x`` is a piece of (``locate``), and the flat position in it of each of
    ``x``'s elements (int64, x's shape); or None."""
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
        positions = torch.arange(d.given.numel()).view(d.given.shape)
        theirs_flat = [(theirs, d.given.permute(theirs).reshape(-1)) for theirs in _layouts(d.given.shape)]  # (N,)
        for mine in _layouts(values.shape):
            flat = values.permute(mine).reshape(-1)  # (n,)
            for theirs, hf_flat in theirs_flat:
                start = _offset(flat, hf_flat, tolerance)
                if start is not None:
                    index.found(d)
                    at = positions.permute(theirs).reshape(-1)[start : start + flat.numel()]
                    inverse = [mine.index(i) for i in range(len(mine))]
                    return d, at.reshape([values.shape[i] for i in mine]).permute(inverse)
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


class Unscaled(list):
    """HF's draws, replayed with the kept elements left unscaled (no 1 / (1 - p)): HF's module
    replayed so gives what a dropout that forgets the scaling gives under the plain replay."""


class Twice(list):
    """HF's draws, replayed with each dropout applied once more on its own output: what a module
    that drops the same tensor twice gives under the plain replay (the second call's input is
    found nowhere, and gets the mask of its own shape)."""


def _smaller_than_hf(x: torch.Tensor, drawn: list[Drawn]) -> bool:
    return bool(drawn) and all(x.numel() < d.given.numel() for d in drawn)


class Session:
    """One replay of HF's draws in the learner's process: a call, and its backward if asked for.

    Each element HF dropped is decided once, by whichever draw reaches it first: torch's dropout
    called by name (``replay``) or a draw of the learner's own (``hand_drawn.Coupling``). A draw
    is known by the generator's state it starts from, as torch's own would be: the same state
    again (``torch.utils.checkpoint`` running the forward again in backward, with the random state
    preserved) decides the same elements alike; another state draws afresh, as torch would.
    """

    def __init__(self, recorded: list[Drawn]):
        self.recorded = recorded
        self.indexes: dict[float, ValueIndex] = {}
        self.owners: dict[int, torch.Tensor] = {}  # id(Drawn) -> claimant number of each element (0: none)
        self.claimants: dict[object, int] = {}
        self.coupling = hand_drawn.Coupling(self.locate)
        self.coupling.keep_shared_whole = isinstance(recorded, SmallKept)
        self.ran = False

    def _index(self, p: float) -> ValueIndex:
        if p not in self.indexes:
            self.indexes[p] = ValueIndex([d for d in self.recorded if d.p == p])
        return self.indexes[p]

    def _claim(self, d: Drawn, at: torch.Tensor, claimant) -> bool:
        owners = self.owners.setdefault(id(d), torch.zeros(d.given.numel(), dtype=torch.int64))
        number = self.claimants.setdefault(claimant, len(self.claimants) + 1)
        held = owners[at.reshape(-1)]
        if bool(((held != 0) & (held != number)).any()):
            return False
        owners[at.reshape(-1)] = number
        return True

    def locate(self, x: torch.Tensor, claimant) -> tuple[torch.Tensor, torch.Tensor] | None:
        """HF's keep-mask of ``x``'s elements and their p, where ``x`` (or ``x`` times 1 - p: the
        scaling done first) is a piece of a recorded input none but ``claimant`` decided yet."""
        paused, self.coupling.paused = self.coupling.paused, True
        try:
            for p in sorted({d.p for d in self.recorded}):
                for values in (x, x.detach() * (1 - p)):
                    found = where(values, [d for d in self.recorded if d.p == p], self._index(p))
                    if found is None:
                        continue
                    d, at = found
                    if claimant is not None and not self._claim(d, at, claimant):
                        return None
                    return d.keep.reshape(-1)[at], torch.full(at.shape, p)
            return None
        finally:
            self.coupling.paused = paused

    def replay(self, x: torch.Tensor, p: float, in_place: bool) -> torch.Tensor:
        """torch's dropout called by name: HF's mask of the elements ``x`` holds (see module doc)."""
        paused, self.coupling.paused = self.coupling.paused, True
        try:
            key = hand_drawn.state_key()
            fresh = torch.rand(x.shape) >= p  # moves the generator on, as torch's dropout would
            found = where(x, [d for d in self.recorded if d.p == p], self._index(p))
            if found is not None and self._claim(found[0], found[1], ("torch", key)):
                keep = found[0].keep.reshape(-1)[found[1]]
            elif found is not None:  # decided already from another state: torch would draw afresh
                keep = fresh
            else:
                whole = isinstance(self.recorded, SmallKept) and _smaller_than_hf(
                    x, [d for d in self.recorded if d.p == p]
                )
                keep = torch.ones(x.shape, dtype=torch.bool) if whole else _own_mask(x, p)
            if isinstance(self.recorded, Unscaled):
                return x.mul_(keep.to(x.dtype)) if in_place else x * keep.to(x.dtype)
            out = _apply(x, keep, p, in_place)
            return _apply(out, _own_mask(out, p), p, in_place) if isinstance(self.recorded, Twice) else out
        finally:
            self.coupling.paused = paused

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Inside, torch's dropout replays HF's draws and the learner's own draws are coupled with
        them; TorchScript runs its graphs as written (its optimised graphs draw by other operators)."""
        optimize = torch._C._get_graph_executor_optimize()
        torch._C._set_graph_executor_optimize(False)
        try:
            with _patched(self.replay), self.coupling:
                yield
        finally:
            torch._C._set_graph_executor_optimize(optimize)

    def run(self, call):
        """``call()`` replaying HF's draws: once, and once more when the learner draws by hand
        (``hand_drawn``: the first run pairs the draws, the second decides them as HF did)."""
        with self.active():
            value = call()
            if self.ran or not self.coupling.paired():
                self.ran = True
                return value
            self.ran = True
            del value
            self.coupling.rewind()
            return call()


_sessions: list[Session] = []  # the session a ``gradients`` call keeps open for its backward


@contextlib.contextmanager
def session(recorded: list[Drawn]) -> Iterator[Session]:
    """A replay of ``recorded`` that the calls inside share (``patched`` finds it): a forward and
    the backward that may run it again."""
    _sessions.append(Session(recorded))
    try:
        yield _sessions[-1]
    finally:
        _sessions.pop()


def patched(recorded: list[Drawn]) -> Session:
    """The session replaying ``recorded`` in the learner's process: the open one, else a new one.
    ``Session.run(call)`` runs a call in it (learner's side)."""
    if _sessions and _sessions[-1].recorded is recorded:
        return _sessions[-1]
    return Session(recorded)
