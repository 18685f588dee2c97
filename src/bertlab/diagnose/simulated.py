"""What a known mistake outputs on the judge's reference, computed once per reference and inputs.

Naming a mistake runs the mistaken computation of every known mistake of the failed task on
the reference's weights (``diagnose.diagnose``). A judge that grades notebook after notebook (the
warm judges, a class, ``--watch``) sees the same failing check on the same inputs again and again:
notebook 07's simulations rerun the pretrained model dozens of times, a third of a graded mistake.
The outputs are kept per reference module, keyed by the mistake, the inputs' contents and the
version counters of the module's tensors (an in-place change to a weight is a new key); a
simulation that draws random numbers is never kept. Only the judge's own objects reach here: the
learner's process holds none of them.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable

import torch

KEPT_PER_MODULE = 256  # the oldest goes first: the corpus and a few random batches per task stay

_kept: weakref.WeakKeyDictionary[torch.nn.Module, dict[tuple, dict]] = weakref.WeakKeyDictionary()


def _feed(h, value) -> bool:
    """Add ``value`` to the digest ``h``; False where it is of a kind the key cannot stand for."""
    if isinstance(value, torch.Tensor):
        try:  # flat first: a 0-d tensor has no bytes view; other layouts have no bytes at all
            data = value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        except (RuntimeError, TypeError):
            return False  # computed every time, never a failed simulation
        h.update(f"T{value.dtype}{tuple(value.shape)}".encode())
        h.update(data)
        return True
    if value is None or isinstance(value, bool | int | float | str):
        h.update(f"{type(value).__name__}:{value!r};".encode())
        return True
    if isinstance(value, dict):
        h.update(b"{")
        return all(isinstance(k, str) and _feed(h, k) and _feed(h, v) for k, v in value.items()) and _feed(h, "}")
    if isinstance(value, list | tuple):
        h.update(f"{type(value).__name__}[".encode())
        return all(_feed(h, v) for v in value) and _feed(h, "]")
    return False


def _versions(module: torch.nn.Module) -> tuple[int, ...]:
    return tuple(t._version for t in (*module.parameters(), *module.buffers()))


def outputs(simulate: Callable, mistake_id: str, reference, inputs) -> dict:
    """``simulate(reference, inputs)``, kept for the next call with the same reference and inputs."""
    h = hashlib.sha256()
    if not isinstance(reference, torch.nn.Module) or not _feed(h, inputs):
        return simulate(reference, inputs)
    key = (mistake_id, h.hexdigest(), _versions(reference))
    kept = _kept.setdefault(reference, {})
    if key in kept:
        return kept[key]
    rng = torch.random.get_rng_state()
    found = simulate(reference, inputs)  # raises as before: a failed simulation is not kept
    # One that drew from torch's generator (dropout in train mode) is not a function of the key,
    # and a kept answer would leave the generator where the draw did not: computed every time.
    if torch.equal(rng, torch.random.get_rng_state()):
        if len(kept) >= KEPT_PER_MODULE:
            kept.pop(next(iter(kept)))
        kept[key] = found
    return found
