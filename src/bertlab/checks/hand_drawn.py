"""Dropout drawn by hand, or by torch's kernels out of Python's sight, given HF's keep decisions.

``located_dropout`` replays HF's masks where the learner's code calls torch's dropout by name.
Right dropout may be drawn otherwise: ``x * (torch.rand_like(x) > p) / (1 - p)``,
``torch.bernoulli(torch.full_like(x, 1 - p))``, ``torch.empty(shape).bernoulli_(1 - p)``, a
``torch.jit.script`` function whose ``F.dropout`` runs in C++ (as ``bernoulli_``, or as
``rand_like(x) < 1 - p`` once TorchScript differentiates it). Every one of them reaches torch's
dispatcher as one of a few random operators (``RANDOM``), which ``Coupling`` sees, wherever called.

The coupling runs the learner's call twice. The first run draws honestly and follows each draw
through the operators that move its elements (views, permutes, comparisons, dtype changes) to
where it meets a tensor it multiplies, masks or selects: when that tensor is one HF dropped
(found by value, as ``located_dropout`` finds it), each drawn element is paired with the HF
element it decides. The second run starts from the same generator states, and each paired draw
is replaced by a draw of the same law that decides as HF's mask did: a uniform value above ``p``
where HF kept (below ``p`` where it dropped), or above ``1 - p`` where HF dropped if the code
compares with ``1 - p``; a Bernoulli(1 - p) draw equal to HF's keep-mask (its negation for a
Bernoulli(p) draw); a normal draw (``randn``, ``randn_like``, ``normal_``, ``normal``), compared
with a quantile of its law, is replaced as the uniform draw it stands for: ``randn_like(x) > t``
with ``t`` the p-quantile of N(0, 1) keeps each element with probability 1 - p, as
``rand_like(x) > p`` does. Each replaced value still has its own law, independent of the others, so the
learner's code sees a fair draw: right code then drops exactly HF's elements, and code that
draws with another p, keeps with the wrong side of the threshold, forgets the 1 / (1 - p) or
drops another tensor gives another output. A draw shared over an axis (a mask broadcast over
tokens, features or heads, ``dropout1d``/``dropout2d`` included) pairs with nothing: one drawn
element would decide several of HF's.

A draw is known again by its generator's state when drawn: a ``torch.utils.checkpoint`` that
preserves the random state runs the forward again in backward from the same states, and gets the
same replaced draws; one that does not draws afresh, as torch would.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.utils._pytree import tree_flatten, tree_map

from bertlab.dispatch_mode import DispatchMode

aten = torch.ops.aten

# Normal draws: compared with a threshold, each is a uniform draw in disguise (its law's CDF of it).
NORMAL = {aten.randn, aten.randn_like, aten.normal_, aten.normal}
RANDOM = {aten.rand, aten.rand_like, aten.bernoulli, aten.bernoulli_, aten.uniform_, *NORMAL}
# Operators that only move, repeat or select elements: a drawn tensor's element indices follow them.
LAYOUT = {
    aten.view,
    aten._unsafe_view,
    aten.reshape,
    aten.permute,
    aten.transpose,
    aten.t,
    aten.expand,
    aten.unsqueeze,
    aten.squeeze,
    aten.select,
    aten.slice,
    aten.alias,
    aten.split,
    aten.split_with_sizes,
    aten.unbind,
    aten.chunk,
    aten.repeat,
}
COMPARE = {aten.gt, aten.ge, aten.lt, aten.le}
# A replaced uniform value stays this far from the threshold: float32 rounding of ``p + ...``
# must not carry it across ``p`` (or ``1 - p``) as a float64 threshold is compared.
MARGIN = 1e-6
# A Bernoulli draw's probability is HF's 1 - p (or p) to float32 rounding of ``full_like(x, 1 - p)``.
SAME_P = 1e-6


@dataclass
class Draw:
    """One random operator's draw in the learner's code, and what the first run learned of it."""

    shape: tuple
    keep: torch.Tensor  # int8, the draw's shape: HF's decision for each element (1, 0), or -1: none
    p: torch.Tensor  # float, the draw's shape: HF's p of the element it decides
    thresholds: list = field(default_factory=list)  # numbers its values were compared with


@dataclass
class _Track:
    draw: Draw
    index: torch.Tensor  # int64, the tracked tensor's shape: the drawn element each element is
    direct: bool  # holds the drawn values themselves (moved, not computed on)


def state_key(generator: torch.Generator | None = None) -> int:
    """The generator's state (torch's default one for None), as a number: what a draw is known by.

    The state, not the operator: TorchScript may draw one dropout by another operator later."""
    generator = generator if generator is not None else torch.default_generator
    return hash(bytes(generator.get_state().numpy()))


def _probability(func, args: tuple, kwargs: dict) -> float | None:
    """A Bernoulli operator's probability of a one, when it is one number; else None."""
    p = kwargs.get("p", args[1] if len(args) > 1 else None)
    if func.overloadpacket is aten.bernoulli and p is None:  # bernoulli(probs)
        p = args[0]
    if isinstance(p, torch.Tensor):
        if p.numel() == 0 or not bool((p == p.reshape(-1)[0]).all()):
            return None
        return float(p.reshape(-1)[0])
    return 0.5 if p is None else float(p)


def _varies(t: torch.Tensor) -> bool:
    """Whether ``t`` holds more than one value: a tensor of zeros (``torch.where(keep, x, 0)``)
    or of one probability is a number, not what a draw is applied to."""
    flat = t.detach().reshape(-1)
    return flat.numel() > 1 and not bool((flat == flat[0]).all())


class Coupling(DispatchMode):
    """Follows the learner's random draws (first run) and replaces them (later runs); see above.

    Args:
        locate: ``(tensor, claimant) -> (keep, p) or None``: HF's keep-mask of the tensor's
            elements (its shape) and their p, where the tensor is one HF dropped (or that times
            1 / (1 - p)) and no other claimant has them; a claimant other than None claims them.
    """

    def __init__(self, locate):
        super().__init__()
        self.locate = locate
        self.discovering = True
        self.draws: list[Draw] = []
        self.plans: dict[int, Draw] = {}  # state key -> what the first run learned
        self.generators: dict[int, tuple[torch.Generator, torch.Tensor]] = {}  # first states
        self.tracked: dict[int, tuple[torch.Tensor, _Track]] = {}
        self.shared = 0  # draws broadcast over a tensor HF drops: one element deciding several
        self.paused = False  # the replay's own work (``located_dropout``) is not the learner's
        self.keep_shared_whole = False  # a shared draw meets the tensor as ones (``SmallKept``)

    def paired(self) -> bool:
        return any(bool((d.keep >= 0).any()) for d in self.draws)

    def rewind(self) -> None:
        """Back to the generator states of the first draw; later runs replace the paired draws."""
        for generator, state in self.generators.values():
            generator.set_state(state)
        self.discovering = False
        self.plans = {key: d for key, d in self.plans.items() if bool((d.keep >= 0).any())}
        self.tracked.clear()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.paused:
            return func(*args, **kwargs)
        if func.overloadpacket in RANDOM:
            return self._draw(func, args, kwargs)
        if not self.tracked:
            return func(*args, **kwargs)
        leaves, _ = tree_flatten((args, kwargs))
        mine = [t for t in leaves if isinstance(t, torch.Tensor) and id(t) in self.tracked]
        if not mine:
            return func(*args, **kwargs)
        track = self.tracked[id(mine[0])][1]
        others = [t for t in leaves if isinstance(t, torch.Tensor) and id(t) not in self.tracked and _varies(t)]
        if len(mine) == 1 and len(others) == 1:
            if self._meets(track, others[0]) == "shared" and self.keep_shared_whole:
                args, kwargs = tree_map(lambda a: torch.ones_like(a) if a is mine[0] else a, (args, kwargs))
            return func(*args, **kwargs)
        out = func(*args, **kwargs)
        if len(mine) != 1 or others:
            return out
        if func.overloadpacket in LAYOUT:
            index = func(*tree_map(lambda a: track.index if a is mine[0] else a, args), **kwargs)
            outs, indexes = (out, index) if isinstance(out, (tuple, list)) else ([out], [index])
            for o, i in zip(outs, indexes, strict=True):
                self._track(o, _Track(track.draw, i, track.direct))
        elif isinstance(out, torch.Tensor) and out.shape == mine[0].shape:  # element by element, with numbers
            if func.overloadpacket in COMPARE and track.direct and self.discovering:
                number = args[1] if len(args) > 1 else None
                if isinstance(number, torch.Tensor) and number.numel() == 1:
                    number = float(number)
                if isinstance(number, (int, float)):
                    track.draw.thresholds.append(float(number))
            direct = track.direct and func.overloadpacket in (aten.clone, aten.detach, aten.lift_fresh)
            self._track(out, _Track(track.draw, track.index, direct))
        return out

    def _track(self, t, track: _Track) -> None:
        if isinstance(t, torch.Tensor):
            self.tracked[id(t)] = (t, track)  # the tensor is held: its id names no other meanwhile

    def _meets(self, track: _Track, x: torch.Tensor) -> str:
        """A tensor from a draw meets ``x`` (multiplies, masks or selects it): pair their elements
        where ``x`` is one HF dropped. Says ``paired``, ``shared`` (one drawn element would decide
        several of HF's), or ``""``."""
        try:
            index = track.index.expand(x.shape)  # (x's shape)
        except RuntimeError:
            return ""
        if int(index.unique().numel()) < index.numel():
            if self.locate(x, None) is None:
                return ""
            self.shared += 1
            return "shared"
        if not self.discovering:
            return ""
        found = self.locate(x, ("draw", id(track.draw)))
        if found is None:
            return ""
        keep, p = found
        flat = index.reshape(-1)
        free = track.draw.keep.reshape(-1)[flat] < 0
        track.draw.keep.view(-1)[flat[free]] = keep.reshape(-1)[free].to(torch.int8)
        track.draw.p.view(-1)[flat[free]] = p.reshape(-1)[free].float()
        return "paired"

    def _draw(self, func, args: tuple, kwargs: dict):
        generator = kwargs.get("generator")
        key_generator = generator if generator is not None else torch.default_generator
        if id(key_generator) not in self.generators:
            self.generators[id(key_generator)] = (key_generator, key_generator.get_state())
        key = state_key(generator)
        out = func(*args, **kwargs)  # drawn honestly first: the generator moves on as it would
        shape = tuple(out.shape)
        if self.discovering:
            draw = Draw(shape, torch.full(shape, -1, dtype=torch.int8), torch.zeros(shape))
            self.plans[key] = draw
        else:
            draw = self.plans.get(key) or Draw(shape, torch.full(shape, -1, dtype=torch.int8), torch.zeros(shape))
            if draw.shape == shape and bool((draw.keep >= 0).any()):
                with torch.no_grad():
                    out.copy_(self._decided(func, args, kwargs, out, draw))
        self.draws.append(draw)
        if out.is_floating_point() or out.dtype == torch.bool:
            self._track(out, _Track(draw, torch.arange(out.numel()).view(shape), True))
        return out

    def _decided(self, func, args: tuple, kwargs: dict, out: torch.Tensor, draw: Draw) -> torch.Tensor:
        """``out`` with each paired element drawn again to decide as HF's mask does (module doc)."""
        paired, keep, p = draw.keep >= 0, draw.keep == 1, draw.p.to(out.dtype)
        if func.overloadpacket in (aten.bernoulli, aten.bernoulli_):
            q = _probability(func, args, kwargs)
            if q is None:
                return out
            ones = torch.where((q - (1 - p)).abs() < SAME_P, keep, torch.where((q - p).abs() < SAME_P, ~keep, out > 0))
            return torch.where(paired, ones.to(out.dtype), out)
        t = draw.thresholds[0] if draw.thresholds else None
        if func.overloadpacket in NORMAL:
            law = _normal_law(func, args, kwargs)
            if law is None:
                return out
            mean, std = law
            # As uniform draws: the CDF of each value and of the threshold, in float64 (a replaced
            # value's quantile must stay on its side of ``t`` once rounded back).
            v = torch.special.ndtr((out.double() - mean) / std)
            t = None if t is None else float(torch.special.ndtr(torch.tensor((t - mean) / std, dtype=torch.float64)))
            u = _uniform_decided(v, t, keep, p.double()).clamp(1e-15, 1 - 1e-15)
            return torch.where(paired, (mean + std * torch.special.ndtri(u)).to(out.dtype), out)
        low, high = (
            kwargs.get("from", args[1] if len(args) > 1 else 0.0),
            kwargs.get("to", args[2] if len(args) > 2 else 1.0),
        )
        if func.overloadpacket is aten.uniform_ and (low, high) != (0.0, 1.0):
            return out
        return torch.where(paired, _uniform_decided(out, t, keep, p), out)


def _uniform_decided(v: torch.Tensor, t: float | None, keep: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Uniform draws ``v`` moved to decide as ``keep`` says, for code that compares them with ``t``.

    Compared with 1 - p, the code keeps values below it; compared with p (or with nothing seen:
    ``floor(u + 1 - p)``), values above it."""
    below = (t - (1 - p)).abs() < (t - p).abs() if t is not None else torch.zeros_like(keep)
    above_p = torch.where(keep, p + MARGIN + (1 - p - MARGIN) * v, (p - MARGIN) * v)
    below_1p = torch.where(keep, (1 - p - MARGIN) * v, 1 - p + MARGIN + (p - MARGIN) * v)
    return torch.where(below, below_1p, above_p)


def _normal_law(func, args: tuple, kwargs: dict) -> tuple[float, float] | None:
    """A normal operator's mean and standard deviation, when both are numbers; else None."""
    if func.overloadpacket in (aten.randn, aten.randn_like):
        return 0.0, 1.0
    if func.overloadpacket is aten.normal_:
        mean, std = (
            kwargs.get("mean", args[1] if len(args) > 1 else 0.0),
            kwargs.get("std", args[2] if len(args) > 2 else 1.0),
        )
    elif func is aten.normal.float_float:
        mean, std = kwargs.get("mean", args[0]), kwargs.get("std", args[1])
    else:  # a tensor of means or of deviations
        return None
    return (float(mean), float(std)) if float(std) > 0 else None
