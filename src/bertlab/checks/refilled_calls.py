"""The calls check's long run, made where the learner's module lives: the same tensors refilled.

Every other check call gets fresh copies of its inputs, and the calls check used to stop after
four calls, so state keyed on a tensor's identity (``data_ptr()``, ``id``, an ``lru_cache`` on
the mask) never met a repeated key, and a change made after the fifth call never showed. Real
callers do both: a training loop refills the same input tensors in place, freed memory is
handed out again, and a module is called thousands of times. ``refilled_calls`` calls the
module as they do, one call after another in the learner's process (a request per call would
cost a round trip each): first on one set of tensors refilled in place with new values, then
on tensors allocated anew after the last ones were freed (where the allocator hands back the
same memory, and often the same ``id``). It returns every answer for the judge to compare, and
names what the calls changed besides the answers: the module's attributes, and caches and
containers outside it (an ``lru_cache``, a global dict, a default argument).
"""

from __future__ import annotations

import torch
from torch import nn

from bertlab.checks.harness import _MODULE_INTERNALS, _fingerprint, invoke, reference_package


def refilled_calls(module, sets: list[dict], order: list[int], fresh_from: int, forbid_shortcuts: bool) -> dict:
    """``module(**sets[i])`` for each ``i`` of ``order``, on the same tensors refilled in place up
    to call ``fresh_from``, then on new tensors allocated after the previous ones were freed.

    Returns:
        ``answers`` (each call's return value, detached), ``failed`` (the ``harness.Outcome`` fields
        of a call that did not return, or None), ``kept`` (the module's attributes the calls
        changed, parameters and buffers apart), ``written`` (parameters and buffers they changed),
        ``outside`` (caches and containers outside the module they changed or hit) and ``reused``
        (calls whose tensors took the memory of the previous call's).
    """
    before, versions, outside = _attributes(module), _versions(module), _outside_state(module)
    held = _filled(sets[order[0]])
    answers, failed, reused = [], None, 0
    for number, which in enumerate(order):
        if number >= fresh_from:
            addresses = {k: v.data_ptr() for k, v in held.items() if isinstance(v, torch.Tensor)}
            del held  # freed now (by reference counts: a full collection would cost far more than the calls)
            held = _filled(sets[which])
            reused += any(isinstance(v, torch.Tensor) and v.data_ptr() == addresses.get(k) for k, v in held.items())
        else:
            for name, value in held.items():
                if isinstance(value, torch.Tensor):
                    value.copy_(sets[which][name])  # the same tensor, its data_ptr and id: new values
        outcome = invoke(module, (), held, forbid_shortcuts=forbid_shortcuts, reuse_arguments=True)
        if outcome.kind != "ok":
            failed = {k: getattr(outcome, k) for k in ("kind", "error", "where", "changed", "shortcut")}
            break
        answers.append(_detached(outcome.value))
        del outcome
    after, now = _attributes(module), _outside_state(module)
    return {
        "answers": answers,
        "failed": failed,
        "kept": sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k)),
        "written": sorted(k for k, v in _versions(module).items() if v != versions.get(k)),
        "outside": sorted(k for k in outside.keys() | now.keys() if outside.get(k) != now.get(k)),
        "reused": reused,
    }


def _attributes(module: nn.Module) -> dict[str, str]:
    """``harness.state_digest`` without the parameters and buffers: reading every weight's bytes
    twice per run cost more than the calls (the stage's first calls read them, and a write here
    shows in ``_versions``)."""
    return {
        f"{prefix}.{name}" if prefix else name: _fingerprint(value)
        for prefix, sub in module.named_modules()
        for name, value in vars(sub).items()
        if name not in _MODULE_INTERNALS
    }


def _versions(module: nn.Module) -> dict[str, int]:
    """Each parameter's and buffer's version counter, which every write in place moves on."""
    return {n: t._version for n, t in [*module.named_parameters(), *module.named_buffers()]}


def _filled(inputs: dict) -> dict:
    """Tensors of their own (newly allocated) holding ``inputs``' values; other values as they are."""
    return {k: (torch.empty_like(v).copy_(v) if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}


def _detached(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return (tuple if isinstance(value, tuple) else list)(_detached(v) for v in value)
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    return value


def _outside_state(module: nn.Module) -> dict[str, str]:
    """What the learner's code can keep between calls outside the module's own attributes: its
    classes' attributes, the functions' default arguments and closures, the notebook's globals
    that forward reads. Each container by its size, each ``lru_cache`` by its hits and size.
    Only ``__dict__``s are read: no learner property runs."""
    found: dict[str, str] = {}
    functions: list[tuple[str, object]] = []
    namespaces: dict[int, dict] = {}
    for cls in {type(sub) for sub in module.modules()}:
        for owner in cls.__mro__:
            if owner.__module__.startswith(("torch", "builtins")) or reference_package(owner.__module__):
                continue
            for name, value in vars(owner).items():
                _note(found, f"{owner.__name__}.{name}", value)
                function = getattr(value, "__func__", value)
                if callable(function):
                    functions.append((f"{owner.__name__}.{name}", function))
    for where, function in functions:
        for i, value in enumerate(getattr(function, "__defaults__", None) or ()):
            _note(found, f"{where}'s default argument {i + 1}", value)
        for key, value in (getattr(function, "__kwdefaults__", None) or {}).items():
            _note(found, f"{where}'s default `{key}`", value)
        for cell in getattr(function, "__closure__", None) or ():
            try:
                _note(found, f"a variable {where} closes over", cell.cell_contents)
            except ValueError:  # an empty cell
                pass
        scope = getattr(function, "__globals__", None)
        if isinstance(scope, dict):
            namespaces[id(scope)] = scope
    for scope in namespaces.values():
        for name, value in list(scope.items()):
            if not name.startswith("_") or not name.strip("_").isdigit():  # IPython's outputs: _1, __
                _note(found, name, value)
    return found


def _note(found: dict[str, str], name: str, value) -> None:
    info = getattr(value, "cache_info", None)
    if callable(info) and hasattr(value, "cache_clear"):
        try:
            stats = info()
            found[f"{name} (an lru_cache)"] = f"{stats.hits} {stats.currsize}"
        except Exception:  # noqa: BLE001  (not functools' after all)
            pass
    elif isinstance(value, (dict, list, set)):
        try:  # its size, and which keys it holds (a key replaced by another shows too)
            keys = hash(tuple(id(k) for k in list(value)[:1000])) if isinstance(value, (dict, set)) else 0
            found[name] = f"{type(value).__name__} {len(value)} {keys}"
        except Exception:  # noqa: BLE001  (a learner's container whose len or iteration raises)
            pass
