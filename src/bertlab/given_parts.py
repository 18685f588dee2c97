"""While a check calls a learner's code, the course's reference modules run only as the grader's parts.

A module task is written with torch alone; the grader puts its own parts (marked ``GIVEN``) into
the modules that build on earlier tasks. The harness's profile watch sees calls into reference
code made on the thread it watches, and a profile hook is set per thread: a forward that builds
the course's BertSelfAttention and runs it on a worker thread (``ThreadPoolExecutor``, a
``threading.Thread``, one started before the check) went unseen. So the course's modules guard
themselves instead (``guard``): while any check's call runs (``watching``, process-wide, not per
thread), their forwards and functions refuse to run unless called as, or from inside, a part the
grader gave, whatever thread calls them, and the refusal is noted for the harness (``found``).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
import threading
from collections.abc import Iterator
from types import ModuleType

from torch import nn

# The mark ``harness.given`` puts on the grader's parts (it crosses to the learner's process with them).
GIVEN = "_bertlab_given"

_lock = threading.Lock()
_watching = 0  # checks' calls running now, in any thread
_watcher: int | None = None  # the thread that made the outermost one
_found = ""  # the first refusal since the outermost one began
_inside = threading.local()  # per thread: depth of given parts running (what they call is theirs)


class ReferenceRefused(RuntimeError):
    """A reference module or function called by learner code while a check runs."""


def is_given(obj) -> bool:
    """Whether ``obj`` is a part the grader gave (a module so marked, or a method of one)."""
    obj = getattr(obj, "__self__", obj)
    return isinstance(obj, nn.Module) and obj.__dict__.get(GIVEN) is True


@contextlib.contextmanager
def watching() -> Iterator[None]:
    """While a check calls learner code: the course's modules run only as the grader's parts."""
    global _watching, _watcher, _found
    with _lock:
        if _watching == 0:
            _found, _watcher = "", threading.get_ident()
        _watching += 1
    try:
        yield
    finally:
        with _lock:
            _watching -= 1


def found() -> str:
    """What the last check's call ran of the course's modules outside the grader's parts, or ""."""
    return _found


def _refuse(what: str) -> None:
    global _found
    elsewhere = threading.get_ident() != _watcher
    text = f"your code calls the course's reference {what}" + (", on a thread of its own" if elsewhere else "")
    with _lock:
        _found = _found or text
    raise ReferenceRefused(f"{text}: while a check runs, the course's modules run only as the grader's parts")


def _as_part(fn, what: str, owners):
    """``fn`` refusing to run, while a check runs, unless one of ``owners(args)`` is a given part or
    a given part's code is running on this thread already."""

    def guarded(*args, **kwargs):
        if not _watching or getattr(_inside, "depth", 0):
            return fn(*args, **kwargs)
        if not any(is_given(o) for o in owners(args)):
            _refuse(what)
        _inside.depth = getattr(_inside, "depth", 0) + 1
        try:
            return fn(*args, **kwargs)
        finally:
            _inside.depth -= 1

    functools.update_wrapper(guarded, fn)
    guarded.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    del guarded.__wrapped__  # type: ignore[attr-defined]  # nothing hands out the unguarded function
    return guarded


def guard(modules: list[ModuleType]) -> None:
    """Guard every module class's forward and every function defined in ``modules`` (the course's
    computing files), and rebind the guarded functions wherever the package holds them."""
    replaced: dict[int, object] = {}
    for module in modules:
        where = os.path.basename(module.__file__ or module.__name__)
        for name, value in list(vars(module).items()):
            if getattr(value, "__module__", None) != module.__name__:
                continue  # imported here, guarded where it is defined
            if isinstance(value, type) and issubclass(value, nn.Module) and "forward" in vars(value):
                value.forward = _as_part(vars(value)["forward"], f"{name} ({where})", lambda args: args[:1])  # type: ignore[attr-defined]
            elif callable(value) and not isinstance(value, type) and not name.startswith("_"):
                guarded = _as_part(value, f"{name} ({where})", lambda args: args[:2])
                replaced[id(value)] = guarded
    for module in [*modules, *(m for m in list(_package_modules(modules)) if m not in modules)]:
        for name, value in list(vars(module).items()):
            if id(value) in replaced:
                setattr(module, name, replaced[id(value)])


def _package_modules(modules: list[ModuleType]) -> Iterator[ModuleType]:
    packages = {m.__name__.rpartition(".")[0] for m in modules}
    for name, module in list(sys.modules.items()):
        if module is not None and (name in packages or name.rpartition(".")[0] in packages):
            yield module
