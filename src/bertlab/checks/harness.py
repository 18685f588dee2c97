"""One call of learner code, made the same way wherever the learner's code lives.

A check never calls a learner's function or module directly: it goes through ``invoke``, which

- gives the call its own copies of every tensor and array argument, so nothing the learner
  does can change the grader's captured activations, and says which argument was changed in
  place when the copy differs afterwards;
- starts from the same global torch state every time (default dtype, grad mode, the seed the
  check asks for), so a notebook cell that changed it cannot change a verdict;
- refuses transformers' code and the course's reference modules inside a module task (a subclass,
  a submodule, or a call made while the learner's code runs): the task is to write them;
- turns an exception into the line of the learner's cell that raised it.

``invoke`` runs in the process that holds the learner's objects; it returns an ``Outcome``
(plain data) that the checks turn into feedback.
"""

from __future__ import annotations

import contextlib
import linecache
import os
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from bertlab import given_parts
from bertlab.checks import located_dropout

# Code that holds complete BERT modules: transformers (the module tasks are written with torch
# alone), sentence-transformers, and the course's own reference modules (``bertlab.bert``, the
# parts a learner's process is given while graded). A learner's module that ends up running it is
# not the learner's. By folder name, and by package name for classes.
_REFERENCE_FOLDERS = {
    f"{os.sep}transformers{os.sep}": "transformers'",
    f"{os.sep}sentence_transformers{os.sep}": "sentence-transformers'",
    f"{os.sep}bertlab{os.sep}bert{os.sep}": "the course's reference",
}
_REFERENCE_PACKAGES = {
    "transformers.": "transformers'",
    "sentence_transformers.": "sentence-transformers'",
    "bertlab.bert.": "the course's reference",
}


def reference_code(filename: str) -> str:
    """Whose reference code the file ``filename`` is (``transformers'``, ...), or ""."""
    return next((whose for folder, whose in _REFERENCE_FOLDERS.items() if folder in filename), "")


def unreadable_reference(err: BaseException) -> str:
    """What ``err`` says when it is a read of reference code refused by the learner's sandbox, or ""."""
    filename = getattr(err, "filename", None)
    if not isinstance(err, PermissionError) or not isinstance(filename, str) or not reference_code(filename):
        return ""
    return (
        f"your code reads {reference_code(filename)} code ({os.path.basename(filename)}), which a notebook "
        "being graded cannot read"
    )


def reference_package(module_name: str) -> str:
    """Whose reference code the module named ``module_name`` is, or ""."""
    return next((whose for package, whose in _REFERENCE_PACKAGES.items() if f"{module_name}.".startswith(package)), "")


@dataclass
class Outcome:
    """What one learner call did.

    Attributes:
        kind: ``ok`` | ``not_implemented`` | ``error`` | ``saved_tensor_changed`` (torch's backward
            found a tensor it saved changed in place) | ``in_place`` | ``shortcut`` | ``wrong_device``.
        value: the return value (``ok`` only).
        error: ``"TypeError: ..."`` for ``error``.
        where: the learner's line that raised (``cell 5, line 12: x = x.view(B, T, -1)``), if known.
        changed: names of the arguments changed in place (``in_place``).
        shortcut: what of transformers' BERT code was found (``shortcut``).
    """

    kind: str
    value: Any = None
    error: str = ""
    where: str = ""
    changed: list[str] = field(default_factory=list)
    shortcut: str = ""


def _copy(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, dict):
        return type(value)((k, _copy(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(_copy(v) for v in value)
    return value


def _changed(before, after, name: str) -> list[str]:
    """Names (``input_tensor``, ``params["dense.weight"]``) whose contents differ."""
    if isinstance(before, torch.Tensor) and isinstance(after, torch.Tensor):
        same = before.shape == after.shape and bool(
            torch.equal(before, after.detach())
            or torch.allclose(before, after.detach(), equal_nan=True, rtol=0, atol=0)
        )
        return [] if same else [name]
    if isinstance(before, np.ndarray) and isinstance(after, np.ndarray):
        return [] if before.shape == after.shape and _same_array(before, after) else [name]
    if isinstance(before, dict) and isinstance(after, dict):
        return [n for k in before for n in _changed(before[k], after.get(k), f'{name}["{k}"]')]
    if isinstance(before, (list, tuple)) and isinstance(after, (list, tuple)) and len(before) == len(after):
        return [n for i, (b, a) in enumerate(zip(before, after, strict=True)) for n in _changed(b, a, f"{name}[{i}]")]
    return []


def _same_array(before: np.ndarray, after: np.ndarray) -> bool:
    """Equal values, NaN equal to NaN. The same bytes first: a byte compare is several times faster
    than ``equal_nan``'s, which the arrays of notebook 01's every call went through."""
    plain = before.dtype.kind in "biufc"  # bytes that are the values (not objects' pointers)
    if plain and before.dtype == after.dtype and before.flags.c_contiguous and after.flags.c_contiguous:
        if np.array_equal(before.reshape(-1).view(np.uint8), after.reshape(-1).view(np.uint8)):
            return True
    try:
        return bool(np.array_equal(before, after, equal_nan=True))
    except TypeError:  # equal_nan on a dtype without NaN (strings, objects)
        return bool(np.array_equal(before, after))


def learner_line(tb) -> str:
    """The deepest frame of ``tb`` that is notebook code (not a library's), as a line of feedback."""
    found = ""
    for frame in traceback.extract_tb(tb):
        name = frame.filename
        if name.startswith("<ipython-input-") or "ipykernel_" in name or name.startswith("<cell"):
            text = (frame.line or linecache.getline(name, frame.lineno or 0)).strip()
            cell = _cell_number(name)
            found = f"{cell}line {frame.lineno}: {text}" if text else f"{cell}line {frame.lineno}"
    return found


def _cell_number(filename: str) -> str:
    # IPython names a cell's code "<ipython-input-N-hash>"; N is the execution count.
    if filename.startswith("<ipython-input-"):
        number = filename.split("-")[2]
        return f"cell [{number}], " if number.isdigit() else ""
    return ""


class AsArray:
    """A tensor the learner's code gets as a numpy array, made in the learner's process.

    The tensor crosses as tensors do, once per learner process and then by key
    (``wire.SentTensors``); an array would be pickled whole with every call (notebook 01 sent each
    layer's weights as arrays 56 times: 326 MB a notebook). Each call gets an array of its own.
    """

    __slots__ = ("tensor",)

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor

    def __reduce__(self):
        return _as_array, (self.tensor,)


def _as_array(tensor: torch.Tensor):
    return tensor.numpy()  # the tensor is the request's own copy (wire.load_request)


GIVEN = given_parts.GIVEN


def given(module: nn.Module) -> nn.Module:
    """Mark ``module`` (HF's own, put in the learner's module by the grader) and every module inside
    it as allowed to run HF's code: the learner may call the part the grader supplied, or its
    children one by one (``self.attention.self(...)``, then ``self.attention.output.dense``), as
    most hand-written layers do."""
    for part in module.modules():
        setattr(part, GIVEN, True)
    return module


def _is_given(obj) -> bool:
    return isinstance(obj, nn.Module) and given_parts.is_given(obj)


def module_shortcut(obj) -> str:
    """What of transformers' model code ``obj`` (a class, module or function) is built on, or ""."""
    classes = []
    if isinstance(obj, type):
        classes.append(("your class", obj))
    elif isinstance(obj, nn.Module):
        given_paths = [name for name, sub in obj.named_modules() if _is_given(sub)]
        classes += [
            (f"`{name or 'the module'}`", type(sub))
            for name, sub in obj.named_modules()
            if not any(name == g or name.startswith(g + ".") for g in given_paths)
        ]
    for where, cls in classes:
        for base in cls.__mro__:
            whose = reference_package(base.__module__)
            if whose:
                return f"{where} is built on {whose} {base.__name__}"
    return ""


# Files of reference code that hold data, not modules: configs, outputs, tokenizers.
_DATA_FILES = ("config.py", "outputs.py", "tokenizer.py")


def _data_method(owner, code) -> bool:
    """Whether ``code`` is a data object's method (a config's, an output's) called on one: a
    reference object that is not a module, in a file that holds no module's computation. A
    module's forward run on a config dressed up with a module's attributes is not one."""
    if owner is None or isinstance(owner, nn.Module) or not reference_package(type(owner).__module__):
        return False
    name = os.path.basename(code.co_filename)
    in_course = f"{os.sep}bertlab{os.sep}bert{os.sep}" in code.co_filename
    return name not in ("activations.py", "pytorch_utils.py") and (
        name in _DATA_FILES if in_course else not name.startswith("modeling_")
    )


class _ShortcutWatch:
    """Notes the first call into reference code (``reference_code``) while learner code runs."""

    def __init__(self):
        self.found = ""
        self.inside_allowed = None  # the frame of a given part's forward or a data method, while it runs

    def __call__(self, frame, event, arg):
        if self.inside_allowed is not None:
            if event == "return" and frame is self.inside_allowed:
                self.inside_allowed = None
            return
        if event == "call" and not self.found:
            name = frame.f_code.co_filename
            whose = reference_code(name)
            if whose:
                code = frame.f_code
                # The object a method is called on, and the module a hook is called for (a hook
                # function's first argument, a hook object's second).
                first_two = [frame.f_locals.get(n) for n in code.co_varnames[: min(2, code.co_argcount)]]
                owner = first_two[0] if first_two else None
                # A config's or an output's own method (``config.hidden_size``) is data, not computation;
                # a part put there by the grader (or its hook) is the grader's: what they call is allowed.
                if _data_method(owner, code) or any(_is_given(o) for o in first_two):
                    self.inside_allowed = frame
                    return
                where = os.path.basename(name)
                self.found = f"your code calls {whose} {frame.f_code.co_name} ({where})"


def _reset_torch_state(seed: int | None, threads: int | None = None) -> None:
    # A learner's cell may have changed these; the grader's inputs assume the defaults.
    torch.set_default_dtype(torch.float32)
    torch.set_grad_enabled(True)
    if threads and torch.get_num_threads() != threads:
        # The grader's side splits sums the same way: float32 results then agree to the last bits.
        torch.set_num_threads(threads)
    if seed is not None:
        torch.manual_seed(seed)


# nn.init's random fillers. A module a check builds gets the reference's weights (strictly: every
# parameter and saved buffer) before any value of it is read, so drawing random numbers first is
# wasted: it is most of what building a BertModel costs, 17 times per notebook 06.
_RANDOM_INITS = (
    "uniform_",
    "normal_",
    "trunc_normal_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "orthogonal_",
    "sparse_",
)


def _nan_fill(tensor, *args, **kwargs):
    with torch.no_grad():
        return tensor.fill_(float("nan")) if tensor.is_floating_point() else tensor.zero_()


@contextlib.contextmanager
def _weights_loaded_later(fn):
    """While a module class is built, nn.init's random fillers write NaN instead (no random draws).

    The loaded weights overwrite every one of them in a module that loads; a value that is read
    anyway (a tensor kept outside the state_dict) makes the outputs NaN, so it fails the check
    as surely as the random values would."""
    if not (isinstance(fn, type) and issubclass(fn, nn.Module)):
        yield
        return
    real = {name: getattr(nn.init, name) for name in _RANDOM_INITS}
    for name in _RANDOM_INITS:
        setattr(nn.init, name, _nan_fill)
    try:
        yield
    finally:
        for name, function in real.items():
            setattr(nn.init, name, function)


def invoke(
    fn,
    args: tuple = (),
    kwargs: dict | None = None,
    *,
    seed: int | None = None,
    forbid_shortcuts: bool = False,
    grad: bool = False,
    threads: int | None = None,
    located: list | None = None,
    reuse_arguments: bool = False,
) -> Outcome:
    """Call ``fn(*args, **kwargs)`` on copies of the arguments and report what happened.

    Args:
        seed: seed torch's global generator right before the call (dropout in train mode).
        located: HF's recorded dropout draws (``located_dropout.Drawn``): every dropout of the call
            applies the recorded mask of the elements it is given (train mode).
        forbid_shortcuts: fail when the call runs reference code (``reference_code``; module tasks).
        grad: keep autograd on (the gradients check); otherwise the call runs under no_grad.
        threads: torch's thread count for the call (the grader's own, so sums split alike).
        reuse_arguments: the call gets the argument objects themselves, not copies (the calls
            check refills the same tensors in place, as a training loop does: ``refilled_calls``).
    """
    kwargs = kwargs or {}
    if forbid_shortcuts:
        found = module_shortcut(fn) or module_shortcut(getattr(fn, "__self__", None))
        if found:
            return Outcome("shortcut", shortcut=found)
    given = (args, kwargs)
    # Without grad the call gets copies and ``given`` stays as it came: it is the record to
    # compare with. With grad the call gets ``given`` itself (gradients flow to its leaves).
    call_args, call_kwargs = (args, kwargs) if grad or reuse_arguments else _copy(given)
    pristine = _copy(given) if grad or reuse_arguments else given
    watch = _ShortcutWatch() if forbid_shortcuts else None
    # The profile watch sees this thread only; the course's modules refuse every other thread too.
    parts_only = given_parts.watching() if forbid_shortcuts else contextlib.nullcontext()
    previous = sys.getprofile()
    _reset_torch_state(seed, threads)
    try:
        if watch is not None:
            sys.setprofile(watch)
        with torch.set_grad_enabled(grad), _weights_loaded_later(fn), parts_only:
            if located is None:
                value = fn(*call_args, **call_kwargs)
            else:
                value = located_dropout.patched(located).run(lambda: fn(*call_args, **call_kwargs))
    except NotImplementedError:
        return _refused(forbid_shortcuts) or Outcome("not_implemented")
    except (Exception, SystemExit) as err:  # noqa: BLE001  (learner code may raise anything, sys.exit() included)
        refused = _refused(forbid_shortcuts)  # caught, or raised again as another error: still the shortcut
        if refused is not None:
            return refused
        unreadable = unreadable_reference(err)
        if forbid_shortcuts and unreadable:
            return Outcome("shortcut", shortcut=unreadable, where=learner_line(err.__traceback__))
        # torch's own words for a tensor autograd saved for backward and the learner changed in place
        kind = "saved_tensor_changed" if "modified by an inplace operation" in str(err) else "error"
        return Outcome(kind, error=f"{type(err).__name__}: {err}".strip(), where=learner_line(err.__traceback__))
    finally:
        sys.setprofile(previous)
        _reset_torch_state(None)
    refused = _refused(forbid_shortcuts)
    if refused is not None:
        return refused
    if watch is not None and watch.found:
        return Outcome("shortcut", shortcut=watch.found)
    elsewhere = sorted({str(t.device) for t in _tensors(value) if t.device.type != "cpu"})
    if elsewhere:
        return Outcome("wrong_device", error=", ".join(elsewhere))
    changed = _changed(pristine[0], call_args, "args") + _changed(pristine[1], call_kwargs, "kwargs")
    if changed:
        return Outcome("in_place", changed=[_argument_name(n) for n in changed])
    return Outcome("ok", value=value)


def _refused(forbid_shortcuts: bool) -> Outcome | None:
    """The shortcut the course's modules refused during the call (on any thread), if any."""
    found = given_parts.found() if forbid_shortcuts else ""
    return Outcome("shortcut", shortcut=found) if found else None


def _argument_name(name: str) -> str:
    # kwargs["input_tensor"] -> input_tensor ; args[0] -> argument 1
    if name.startswith("kwargs["):
        return name[len('kwargs["') :].replace('"]', "", 1)
    if name.startswith("args["):
        index, _, rest = name[len("args[") :].partition("]")
        return f"argument {int(index) + 1}{rest}"
    return name


def in_learner_process(fn) -> bool:
    """Whether ``fn`` is a proxy of the learner's process (``type(fn)`` is the real class even
    for a proxy, whose ``__class__`` may pose as another)."""
    return getattr(type(fn), "_remote_invoke", None) is not None


def invoke_learner(fn, args: tuple, kwargs: dict, **options) -> Outcome:
    """``invoke`` where ``fn`` lives: here, or in the learner's process when ``fn`` is a proxy."""
    if in_learner_process(fn):
        return type(fn)._remote_invoke(fn, args, kwargs, **options)
    return invoke(fn, args, kwargs, **options)


def invoke_beside(obj, fn, args: tuple) -> Outcome:
    """``invoke(fn, args)`` where ``obj`` lives: in the learner's process when ``obj`` is a proxy
    (``fn``, a grader's function, is loaded there by name), else here."""
    if in_learner_process(obj):
        return type(obj)._remote_invoke_beside(obj, fn, args)
    return invoke(fn, args)


def state_shapes(module) -> dict[str, tuple]:
    """``module.state_dict()``'s names -> shapes, computed where the module lives: a learner's
    model's weights (BertModel: 90 MB) never cross the pipe only to have their shapes read."""
    remote = getattr(type(module), "_remote_state_shapes", None)
    if remote is not None:
        return {k: tuple(v) for k, v in remote(module).items()}
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}


# What nn.Module keeps for itself: hooks and the like change with torch's own bookkeeping.
_MODULE_INTERNALS = frozenset(
    {
        "_parameters",
        "_buffers",
        "_modules",
        "_non_persistent_buffers_set",
        "_state_dict_hooks",
        "_state_dict_pre_hooks",
        "_load_state_dict_pre_hooks",
        "_load_state_dict_post_hooks",
        "_forward_hooks",
        "_forward_pre_hooks",
        "_backward_hooks",
        "_backward_pre_hooks",
        "_forward_hooks_with_kwargs",
        "_forward_pre_hooks_with_kwargs",
        "_forward_hooks_always_called",
        "_is_full_backward_hook",
        "_compiled_call_impl",
        GIVEN,
    }
)


_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _fingerprint(value, depth: int = 0) -> str:
    """A short text that changes when ``value`` does: a tensor's bytes, a container's items."""
    if isinstance(value, torch.Tensor):
        # The sum of the bit patterns (and of every seventh) changes with any write:
        # a few milliseconds for BertModel's 90 MB, where hashing its bytes took a tenth of a second.
        flat = value.detach().cpu().contiguous().reshape(-1)
        bits = flat.view(_SAME_SIZE_INT.get(flat.element_size(), torch.uint8))
        every_seventh = bits[::7].sum(dtype=torch.int64)  # with the full sum: a swap of two values shows
        return f"tensor {tuple(value.shape)} {value.dtype} {int(bits.sum(dtype=torch.int64))} {int(every_seventh)}"
    if isinstance(value, (bool, int, float, str, bytes, type(None))):
        return repr(value)[:200]
    if depth < 3 and isinstance(value, (list, tuple)):
        return f"{type(value).__name__}[" + ", ".join(_fingerprint(v, depth + 1) for v in value) + "]"
    if depth < 3 and isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_fingerprint(v, depth + 1)}" for k, v in value.items()) + "}"
    return f"{type(value).__qualname__} #{id(value)}"


def state_digest(module) -> dict[str, str]:
    """Every parameter, buffer and attribute of ``module`` and its children -> a fingerprint,
    computed where the module lives: what a forward that keeps state between calls changes."""
    remote = getattr(type(module), "_remote_state_digest", None)
    if remote is not None:
        return dict(remote(module))
    digest = {}
    for prefix, sub in module.named_modules():
        for name, value in [*vars(sub).items(), *sub._parameters.items(), *sub._buffers.items()]:
            if name not in _MODULE_INTERNALS:
                digest[f"{prefix}.{name}" if prefix else name] = _fingerprint(value)
    return digest


def load_weights(module, state: dict) -> None:
    """``module.load_state_dict(state, strict=True)``, then eval mode, where the module lives.

    Raises RuntimeError on any failure, with the error's type in its text when it is not
    torch's RuntimeError (a learner's ``load_state_dict`` may raise anything).
    """
    remote = getattr(type(module), "_remote_load_weights", None)
    if remote is not None:  # the learner's process runs the lines below
        remote(module, state)
        return
    try:
        module.load_state_dict(state, strict=True)
        module.eval()
    except (Exception, SystemExit) as err:
        if type(err) is RuntimeError:
            raise
        raise RuntimeError(f"{type(err).__name__}: {err}") from None


def describe_call(args: tuple, kwargs: dict) -> str:
    """``(hidden_states=float32 [2, 7, 384], attention_mask=None)``: what a check passed."""
    parts = [_describe_value(a) for a in args] + [f"{k}={_describe_value(v)}" for k, v in kwargs.items()]
    text = ", ".join(parts)
    return f"({text if len(text) <= 300 else text[:297] + '...'})"


def _describe_value(value) -> str:
    if isinstance(value, AsArray):  # what the learner's function receives: an array
        return f"{str(value.tensor.dtype).removeprefix('torch.')} array {list(value.tensor.shape)}"
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')} tensor {list(value.shape)}"
    if isinstance(value, np.ndarray):
        return f"{value.dtype} array {list(value.shape)}"
    if isinstance(value, dict):
        return (
            "{"
            + ", ".join(f"{k!r}: {_describe_value(v)}" for k, v in list(value.items())[:4])
            + (", ...}" if len(value) > 4 else "}")
        )
    if isinstance(value, (list, tuple)) and len(value) <= 4:
        inner = ", ".join(_describe_value(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, (int, float, str, bool)) or value is None:
        return repr(value)
    return type(value).__name__


def gradients(
    fn,
    args: tuple,
    kwargs: dict,
    grad_names: tuple[str, ...],
    seed: int,
    forbid_shortcuts: bool = True,
    train: bool = False,
    located: list | None = None,
) -> Outcome:
    """Backpropagate a random weighting of ``fn(*args, **kwargs)``'s tensors; report the gradients.

    Runs where ``fn`` lives, in eval mode, or with ``train`` in train mode, where every dropout
    applies HF's recorded masks (``located``, see ``located_dropout``) so that HF's gradients
    are comparable. The value of an ``ok`` outcome is a dict: ``params``
    (parameter name -> gradient or None), ``inputs`` (name in ``grad_names`` -> gradient or None),
    ``connected`` (whether the output depends on anything that needs a gradient) and ``shapes``
    (the weighted tensors' shapes, in order: the judge weights HF's outputs the same way).
    """
    module = fn if isinstance(fn, nn.Module) else None
    if module is not None:
        module.requires_grad_(True).train(train)  # eval: no dropout; train: HF's masks (``located``)
        for param in module.parameters():  # the grader's parts share their tensors between checks:
            param.grad = None  # what an earlier check's backward left must not add to this one's
    kwargs = {k: (v.detach().clone().requires_grad_(True) if k in grad_names else _copy(v)) for k, v in kwargs.items()}
    # One replay for the forward and its backward: a checkpoint runs the forward again in
    # backward, and draws HF's masks again only from the random state it preserved.
    with located_dropout.session(located) if located is not None else contextlib.nullcontext():
        outcome = invoke(fn, _copy(args), kwargs, grad=True, forbid_shortcuts=forbid_shortcuts, located=located)
        if outcome.kind != "ok":
            return outcome
        tensors = [t for t in _tensors(outcome.value) if t.is_floating_point()]
        loss = weighted_sum(tensors, seed)
        connected = isinstance(loss, torch.Tensor) and loss.requires_grad
        if connected:
            done = invoke(loss.backward, grad=True, located=located)
            if done.kind != "ok":
                return done
    params = (
        {n: (None if p.grad is None else p.grad.detach().clone()) for n, p in module.named_parameters()}
        if module
        else {}
    )
    inputs = {k: (None if kwargs[k].grad is None else kwargs[k].grad.clone()) for k in grad_names if k in kwargs}
    return Outcome(
        "ok",
        value={"params": params, "inputs": inputs, "connected": connected, "shapes": [tuple(t.shape) for t in tensors]},
    )


def weighted_sum(tensors: list[torch.Tensor], seed: int):
    """The loss both sides backpropagate: each output times its own random weights, summed."""
    generator = torch.Generator().manual_seed(seed)
    return sum((t * torch.randn(t.shape, generator=generator)).sum() for t in tensors)


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def gradients_of(fn, *args, **options) -> Outcome:
    """``gradients`` where ``fn`` lives: here, or in the learner's process when ``fn`` is a proxy."""
    remote = getattr(type(fn), "_remote_gradients", None)
    if remote is not None:
        return remote(fn, *args, **options)
    return gradients(fn, *args, **options)
