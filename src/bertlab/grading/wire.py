"""What crosses between the judge and the learner's process, and how.

Frames are length-prefixed. The judge (trusted) sends pickles: the learner's process may load
them. The learner's process (untrusted) answers in plain data only: tensors, numbers, strings,
lists, tuples and tagged dicts, written by ``dump_answer`` as a JSON header (the structure) and
the tensors' raw bytes after it. The judge reads them back with ``load_answer``, ``decode`` and
``load_reply``, which build no object of the learner's choosing and check every field: whatever
the learner's process sends, they return plain data or raise ``MalformedAnswer`` (a
ValueError), which the judge reports as the learner's failure (``proxy.Learner``). Anything
that is not plain data (a class, a module, a function) stays in the learner's process and
crosses as a numbered handle with a description of its type.
"""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import reprlib
import struct

import numpy as np
import torch

TAG = "__bertlab__"
MAX_FRAME = 1 << 31  # 2 GiB: a bigger answer is a runaway learner, not an output


READY = "ready"  # the learner process's first frame, once it is set up (see proxy.Learner._started)


class ChannelClosed(Exception):
    """The other process is gone (it exited, crashed or was killed)."""


class MalformedAnswer(ValueError):
    """An answer the grader cannot read. The learner's process sent it, and anything may run
    there: it is the learner's failure (``proxy.Learner`` stops that process and says why), never
    the grader's. The text names what is wrong, for the learner to read."""


# A frame's parts are written as they lie in memory (``os.writev``), a tensor's bytes straight from
# its storage, and read into one buffer allocated for the whole frame: a large answer (a model's
# gradients, 90 MB) is copied by the kernel and once into its own tensors, not five times more
# by joins and concatenations on either side.
_IOV_MAX = 1024  # the fewest buffers one writev takes on the platforms the course runs on


def write_frame(fd: int, payload: bytes | list) -> None:
    """Write one frame: ``payload``'s length (8 bytes, little-endian), then ``payload``, which is
    bytes or a list of buffers (bytes, contiguous uint8 arrays) written one after another."""
    parts = [payload] if isinstance(payload, (bytes, bytearray, memoryview)) else payload
    views = [memoryview(part).cast("B") for part in parts]
    views = [memoryview(struct.pack("<Q", sum(v.nbytes for v in views))), *(v for v in views if v.nbytes)]
    while views:
        written = os.writev(fd, views[:_IOV_MAX])
        while written:  # drop what went out; the first view left may have gone out in part
            if written >= len(views[0]):
                written -= len(views.pop(0))
            else:
                views[0], written = views[0][written:], 0


def read_exactly(fd: int, size: int) -> memoryview:
    """``size`` bytes from ``fd``, read into one buffer. Its pages are not written before the bytes
    arrive (``torch.empty``), so a frame that claims more than is sent costs no memory it did not fill."""
    buffer = memoryview(torch.empty(size, dtype=torch.uint8).numpy()) if size else memoryview(b"")
    got = 0
    while got < size:
        count = os.readv(fd, [buffer[got : got + (1 << 24)]])
        if not count:
            raise ChannelClosed("the other process closed the channel")
        got += count
    return buffer


def read_frame(fd: int) -> memoryview:
    (size,) = struct.unpack("<Q", read_exactly(fd, 8))
    if size > MAX_FRAME:
        raise ChannelClosed(f"an answer of {size} bytes is larger than any output of a task")
    return read_exactly(fd, size)


# -- judge -> learner: pickles, with handles for the learner's own objects -------------------


_HOOKS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_state_dict_hooks",
    "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks",
)


def _module_without_hooks(cls):
    return cls.__new__(cls)


def _as_module(cls: type, module) -> tuple:
    """The pickle reduction of ``module`` as an instance of ``cls``, without its hooks."""
    state = dict(module.__dict__)
    for name in _HOOKS:
        if name in state:
            state[name] = type(state[name])()
    return _module_without_hooks, (cls,), state


class SentTensors:
    """The judge's record of the large tensors a learner process already holds.

    Checks send the same captured activations and pretrained weights dozens of times per
    notebook; each crosses the pipe once, as raw bytes (a pickled tensor is a zip archive of
    its own), and is named by a key afterwards. The record keeps a
    reference to every tensor it names, so the memory a key points at stays that tensor's (a
    state dict's fresh views of the same weights share a key), and its version counter, which
    views share, so a tensor changed in place is sent again.
    """

    def __init__(self) -> None:
        self.held: dict[tuple, tuple[torch.Tensor, int]] = {}

    def key(self, obj, new: dict, lend: bool = False) -> tuple | None:
        """``obj``'s persistent id, adding it to ``new`` when the learner does not hold it yet.

        ``lend``: the learner's process may use its held tensor itself, not a copy (see
        ``dump_request``)."""
        if (
            type(obj) not in (torch.Tensor, torch.nn.Parameter)
            or obj.layout != torch.strided
            or obj.device.type != "cpu"
            or obj.is_leaf is False
        ):
            return None
        key = (obj.data_ptr(), tuple(obj.shape), obj.stride(), str(obj.dtype))
        held = self.held.get(key)
        if held is None or held[1] != held[0]._version:
            self.held[key] = (obj, obj._version)
            new[key] = obj.detach()
        return ("lent" if lend else "tensor", key, type(obj) is torch.nn.Parameter, obj.requires_grad)

    def forget(self, keys) -> None:
        """Send these again when next asked: the learner's process wrote to its held copies."""
        for key in keys:
            self.held.pop(tuple(key), None)


def dump_request(
    message, refs: dict[int, int], pretrained=None, sent: SentTensors | None = None, lend: bool = False
) -> bytes:
    """``request_parts`` joined: the request as one bytes object."""
    return b"".join(request_parts(message, refs, pretrained, sent, lend))


def request_parts(
    message, refs: dict[int, int], pretrained=None, sent: SentTensors | None = None, lend: bool = False
) -> list:
    """Pickle ``message``, as a frame's parts (``write_frame``); proxies (their ``id()`` a key of
    ``refs``) cross as their handle.

    ``pretrained`` (the reference model) crosses as a name: the learner's process has its own
    copy. Large tensors cross once per learner process (``sent``), then by key. Other modules
    cross without their hooks (a hook may be a closure, which does not pickle; a module sent to
    the learner never needs them). The judge's modules and configs are the course's own
    (``bertlab.bert``); one of transformers' would be refused here: the learner's process cannot
    read transformers.

    ``lend``: the held tensors are used as they are, not copied, for a request that only reads
    them (loading weights): a copy of a whole model's weights per load is most of what it costs.
    """
    from torch import nn

    new: dict[tuple, torch.Tensor] = {}

    class _Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            if pretrained is not None and obj is pretrained:
                return ("pretrained",)
            handle = refs.get(id(obj))
            if handle is not None:
                return ("ref", handle)
            return sent.key(obj, new, lend) if sent is not None and isinstance(obj, torch.Tensor) else None

        def reducer_override(self, obj):
            home = getattr(type(obj), "__module__", None)
            if isinstance(home, str) and home.startswith("transformers.") and not isinstance(obj, type):
                raise TypeError(
                    f"the grader cannot send transformers' {type(obj).__qualname__} to the learner's process, "
                    "which cannot read transformers: the judge's reference is the course's own (bertlab.bert)"
                )
            if isinstance(obj, nn.Module) and type(obj) is not type:
                return _as_module(type(obj), obj)
            return NotImplemented

    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(message)
    tensors = answer_parts((list(new), list(new.values())))
    size = sum(memoryview(part).nbytes for part in tensors)
    return [struct.pack("<Q", size), *tensors, buffer.getbuffer()]


def load_request(payload: bytes | memoryview, objects: dict[int, object], pretrained=None, held: dict | None = None):
    """Inverse of ``dump_request``; ``pretrained()`` gives a fresh copy of the reference model.

    ``held`` is the learner's side of ``SentTensors``: every request gets its own copies, so
    nothing a learner's call does to an input reaches the next call; a lent tensor (``lend``) is
    the held one itself, for requests that only read their inputs.
    """
    payload = memoryview(payload)
    (size,) = struct.unpack("<Q", payload[:8])
    held = {} if held is None else held
    keys, values = load_answer(payload[8 : 8 + size])
    held.update(zip(keys, values, strict=True))
    copies: dict[tuple, torch.Tensor] = {}  # one object per key within a request, as pickle would

    def tensor(key: tuple, parameter: bool, requires_grad: bool, lent: bool = False):
        if key not in copies:
            copy = held[key].detach() if lent else held[key].clone()
            copies[key] = torch.nn.Parameter(copy, requires_grad) if parameter else copy.requires_grad_(requires_grad)
        return copies[key]

    class _Unpickler(pickle.Unpickler):
        def persistent_load(self, pid):
            if pid[0] == "pretrained":
                return pretrained()
            if pid[0] in ("tensor", "lent"):
                return tensor(*pid[1:], lent=pid[0] == "lent")
            return objects[pid[1]]

    return _Unpickler(io.BytesIO(payload[8 + size :])).load()


# -- learner -> judge: plain data only ----------------------------------------------------------


def encode(value, keep) -> object:
    """``value`` as plain data; ``keep(obj) -> handle description`` for anything else."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value if not isinstance(value, str) or len(value) < 100_000 else value[:100_000]
    if isinstance(value, torch.Tensor):
        if value.is_sparse or value.layout != torch.strided:
            return keep(value)
        # No copy: the answer is written before any more of the learner's code runs (``answer_parts``).
        return value.detach().cpu().as_subclass(torch.Tensor).contiguous()
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "fiub" or value.dtype.byteorder == ">":
            return keep(value)
        return {TAG: "ndarray", "dtype": value.dtype.str, "data": torch.from_numpy(np.ascontiguousarray(value).copy())}
    if isinstance(value, np.generic) and value.dtype.kind in "fiub":
        return {TAG: "npscalar", "dtype": value.dtype.str, "value": value.item()}
    if isinstance(value, tuple):
        return tuple(encode(v, keep) for v in value)
    if isinstance(value, list):
        return [encode(v, keep) for v in value]
    if isinstance(value, dict):
        return {
            TAG: "dict",
            "keys": [encode(k, keep) for k in value],
            "values": [encode(v, keep) for v in value.values()],
        }
    return keep(value)


# Answers are JSON for their structure and raw bytes for their tensors: nothing in them can
# build an object of the learner's choosing, and reading one costs microseconds where
# ``torch.load(weights_only=True)`` of a zip archive costs a millisecond, hundreds of times a
# notebook.
_DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.bool,
    )
}


def dump_answer(message) -> bytes:
    """``answer_parts`` joined: the answer as one bytes object."""
    return b"".join(answer_parts(message))


def answer_parts(message) -> list:
    """``message`` (plain data from ``encode``) as a JSON header and the tensors' bytes, as a
    frame's parts (``write_frame``): the tensors' bytes are views of their storage, not copies.

    The frame: the header's length (8 bytes, little-endian), the header
    ``{"value": tree, "tensors": [{"dtype", "shape", "nbytes"}, ...]}``, then each tensor's bytes
    in that order. In the tree a tuple is ``{"t": [...]}``, a dict (string keys) ``{"d": {...}}``
    and a tensor ``{"x": i}``, its index in ``tensors``, the tensors numbered in the order the
    tree meets them; lists, strings, numbers and None are themselves.
    """
    buffers: list[np.ndarray] = []
    tensors: list[dict] = []

    def tree(value):
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, torch.Tensor):
            dtype = str(value.dtype).removeprefix("torch.")
            if dtype not in _DTYPES:
                raise ValueError(f"a tensor of dtype {dtype} cannot be sent")
            flat = value.detach().contiguous().reshape(-1)
            if flat.stride(0) != 1:  # "contiguous" at any stride: one element or none (an expand)
                flat = torch.empty(flat.shape, dtype=flat.dtype).copy_(flat)
            data = flat.view(torch.uint8).numpy()  # a view of the tensor's bytes: no copy
            tensors.append({"dtype": dtype, "shape": list(value.shape), "nbytes": data.nbytes})
            buffers.append(data)
            return {"x": len(tensors) - 1}
        if isinstance(value, tuple):
            return {"t": [tree(v) for v in value]}
        if isinstance(value, list):
            return [tree(v) for v in value]
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return {"d": {k: tree(v) for k, v in value.items()}}
        raise ValueError(f"{type(value).__name__} is not plain data")

    header = json.dumps({"value": tree(message), "tensors": tensors}).encode()
    return [struct.pack("<Q", len(header)) + header, *buffers]


# Limits on what an answer may hold: beyond them it is no output of a task, and reading it would
# overflow the stack (nesting) or torch's size arithmetic (dimensions).
MAX_DEPTH = 100
MAX_DIMS = 64

# How ``MalformedAnswer`` shows a piece of an answer: a glimpse, since the text is the learner's
# feedback and the piece may be megabytes long.
_GLIMPSE = reprlib.Repr()  # set attribute by attribute: Python 3.11's takes no arguments
_GLIMPSE.maxlevel, _GLIMPSE.maxstring, _GLIMPSE.maxother = 2, 60, 60
_GLIMPSE.maxtuple = _GLIMPSE.maxlist = _GLIMPSE.maxdict = 4


def shown(value) -> str:
    """A short text of ``value``, a piece of an answer, for a ``MalformedAnswer``'s message."""
    return _GLIMPSE.repr(value)


def hashable(value) -> bool:
    """Whether ``value`` (a piece of an answer) can be a dict's key."""
    try:
        hash(value)
    except TypeError:  # a list, a dict or an array, maybe inside a tuple
        return False
    return True


def _of_type(value, types: tuple[type, ...]) -> bool:
    if type(value) is bool:  # isinstance(True, int) holds: a bool is no int here
        return bool in types or object in types
    return isinstance(value, types)


def record(value, fields: dict[str, type | tuple[type, ...]], what: str) -> dict:
    """``value`` if it is a dict with exactly ``fields``' keys, each holding a value of its
    type(s) (``object``: anything), else MalformedAnswer about ``what``."""
    if not isinstance(value, dict):
        raise MalformedAnswer(f"{what} is {shown(value)}, not a dict")
    missing = [name for name in fields if name not in value]
    unknown = [name for name in value if name not in fields]
    if missing or unknown:
        wrong = ([f"lacks the fields {shown(missing)}"] if missing else []) + (
            [f"has the unknown fields {shown(unknown)}"] if unknown else []
        )
        raise MalformedAnswer(f"{what} {' and '.join(wrong)}")
    for name, allowed in fields.items():
        types = allowed if isinstance(allowed, tuple) else (allowed,)
        if not _of_type(value[name], types):
            expected = " or ".join(t.__name__ for t in types)
            raise MalformedAnswer(f"{what}'s {name} is {shown(value[name])}, not of type {expected}")
    return value


def load_answer(payload: bytes | memoryview):
    """Inverse of ``dump_answer``; MalformedAnswer (a ValueError) on anything else.

    Every field is checked before it is used: the header is JSON of the shape ``dump_answer``
    writes, each tensor's dtype, shape and size agree and its bytes are there, and the value's
    tree uses each tensor once, in order, with nothing left over.
    """
    payload = memoryview(payload)
    header, offset = _header(payload)
    reader = _TreeReader(_tensors(header["tensors"], payload, offset))
    value = reader.value(header["value"], 0)
    if reader.used != len(reader.tensors):
        raise MalformedAnswer(f"it holds {len(reader.tensors)} tensors and its value uses {reader.used}")
    return value


def _header(payload: memoryview) -> tuple[dict, int]:
    """An answer's JSON header, and where its tensors' bytes start."""
    if len(payload) < 8:
        raise MalformedAnswer(f"an answer of {len(payload)} bytes is shorter than its header's 8-byte length")
    (size,) = struct.unpack("<Q", payload[:8])
    if size > len(payload) - 8:
        raise MalformedAnswer(f"its header is said to be {size} bytes long, and only {len(payload) - 8} follow")
    try:
        header = json.loads(bytes(payload[8 : 8 + size]))
    # JSONDecodeError, UnicodeDecodeError and a too long integer are ValueErrors; deep nesting
    # overflows the decoder's stack.
    except (ValueError, RecursionError) as err:
        raise MalformedAnswer(f"its header is not JSON ({type(err).__name__}: {str(err)[:200]})") from err
    return record(header, {"value": object, "tensors": list}, "its header"), 8 + size


_TENSOR_FIELDS: dict[str, type | tuple[type, ...]] = {"dtype": str, "shape": list, "nbytes": int}


def _tensors(specs: list, payload: memoryview, offset: int) -> list[torch.Tensor]:
    """The tensors ``specs`` (the header's) describe, read from ``payload`` from ``offset`` on."""
    tensors = []
    for index, spec in enumerate(specs):
        what = f"tensor {index}"
        record(spec, _TENSOR_FIELDS, f"{what}'s description")
        dtype, shape = _dtype(spec["dtype"], what), _shape(spec["shape"], what)
        nbytes = math.prod(shape) * dtype.itemsize
        if spec["nbytes"] != nbytes:
            raise MalformedAnswer(
                f"{what} ({spec['dtype']} of shape {shape}) has {nbytes} bytes, not {shown(spec['nbytes'])}"
            )
        if offset + nbytes > len(payload):
            raise MalformedAnswer(f"{what}'s {nbytes} bytes run past the end of the answer")
        tensors.append(_tensor(memoryview(payload)[offset : offset + nbytes], dtype, shape, what))
        offset += nbytes
    if offset != len(payload):
        raise MalformedAnswer(f"{len(payload) - offset} bytes follow its last tensor")
    return tensors


def _dtype(name: str, what: str) -> torch.dtype:
    if name not in _DTYPES:
        raise MalformedAnswer(f"{what}'s dtype {shown(name)} is none of {', '.join(_DTYPES)}")
    return _DTYPES[name]


def _shape(shape: list, what: str) -> list[int]:
    if len(shape) > MAX_DIMS or not all(type(n) is int and n >= 0 for n in shape):
        raise MalformedAnswer(f"{what}'s shape {shown(shape)} is not a list of at most {MAX_DIMS} sizes >= 0")
    # Sizes of 0 aside, still within a frame: torch computes strides from the other sizes.
    if math.prod(max(n, 1) for n in shape) > MAX_FRAME:
        raise MalformedAnswer(f"{what}'s shape {shown(shape)} is larger than any answer")
    return shape


def _tensor(data: memoryview, dtype: torch.dtype, shape: list[int], what: str) -> torch.Tensor:
    """The tensor of ``shape`` whose bytes are ``data`` (exactly ``prod(shape) * itemsize``)."""
    if not data:
        return torch.empty(shape, dtype=dtype)
    flat = torch.frombuffer(bytearray(data), dtype=dtype)  # (prod(shape),)
    # torch stores a bool as one byte and assumes it is 0 or 1: another is no bool at all
    if dtype == torch.bool and int(flat.view(torch.uint8).max()) > 1:
        raise MalformedAnswer(f"{what}, of dtype bool, holds bytes other than 0 and 1")
    return flat.reshape(shape)


class _TreeReader:
    """An answer's value from its header's tree, taking the tensors in the order ``dump_answer``
    wrote them: each once, so no two places of a value share a tensor."""

    def __init__(self, tensors: list[torch.Tensor]):
        self.tensors, self.used = tensors, 0

    def value(self, node, depth: int):
        if depth > MAX_DEPTH:
            raise MalformedAnswer(f"it is nested more than {MAX_DEPTH} levels deep")
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, list):
            return [self.value(v, depth + 1) for v in node]
        if isinstance(node, dict) and len(node) == 1:
            ((kind, inner),) = node.items()
            if kind == "x":
                return self.tensor(inner)
            if kind == "t" and isinstance(inner, list):
                return tuple(self.value(v, depth + 1) for v in inner)
            if kind == "d" and isinstance(inner, dict):
                return {k: self.value(v, depth + 1) for k, v in inner.items()}
        raise MalformedAnswer(f"its value holds {shown(node)}, which is no node of an answer's tree")

    def tensor(self, index) -> torch.Tensor:
        if type(index) is not int or index != self.used or index >= len(self.tensors):
            raise MalformedAnswer(
                f"its value names tensor {shown(index)} where tensor {self.used} comes next "
                f"(each of its {len(self.tensors)} tensors once, in order)"
            )
        self.used += 1
        return self.tensors[index]


# The arrays ``encode`` sends: NumPy's name of each dtype (native byte order), and the dtype of
# the tensor that carries the array's bytes.
_ARRAY_DTYPES = {
    np.dtype(array_dtype).str: tensor_dtype
    for array_dtype, tensor_dtype in (
        (np.bool_, torch.bool),
        (np.uint8, torch.uint8),
        (np.int8, torch.int8),
        (np.int16, torch.int16),
        (np.int32, torch.int32),
        (np.int64, torch.int64),
        (np.float16, torch.float16),
        (np.float32, torch.float32),
        (np.float64, torch.float64),
    )
}
# The Python type of an array scalar's ``item()``, by NumPy's kind of dtype.
_ITEM_TYPES = {"b": bool, "i": int, "u": int, "f": float}

# What ``learner._describe`` tells of an object that stays in the learner's process.
HANDLE_META: dict[str, type | tuple[type, ...]] = {
    "is_class": bool,
    "callable": bool,
    "type": str,
    "name": str,
    "torch_base": (str, type(None)),
    "mro": list,
    "repr": str,
}


def decode(value, handle):
    """Inverse of ``encode``; ``handle(description) -> proxy`` for kept objects, their
    description checked first. MalformedAnswer on a dict that is none ``encode`` writes."""
    if isinstance(value, tuple):
        return tuple(decode(v, handle) for v in value)
    if isinstance(value, list):
        return [decode(v, handle) for v in value]
    if not isinstance(value, dict):
        return value
    kind = value.get(TAG)
    kind = kind if isinstance(kind, str) else None  # no == with a tensor or an array: that compares elements
    if kind == "ndarray":
        return _array(record(value, {TAG: str, "dtype": str, "data": torch.Tensor}, "an array"))
    if kind == "npscalar":
        return _array_scalar(record(value, {TAG: str, "dtype": str, "value": (bool, int, float)}, "a NumPy scalar"))
    if kind == "dict":
        return _dict(record(value, {TAG: str, "keys": list, "values": list}, "a dict"), handle)
    if kind == "handle":
        description = record(value, {TAG: str, "id": int, "meta": dict}, "a handle")
        record(description["meta"], HANDLE_META, "a handle's description")
        return handle(description)
    raise MalformedAnswer(f"{shown(value)} is no dict encode writes")  # only tagged dicts are sent


def _array(value: dict) -> np.ndarray:
    dtype, data = value["dtype"], value["data"]
    if _ARRAY_DTYPES.get(dtype) != data.dtype:
        raise MalformedAnswer(f"an array of dtype {shown(dtype)} is carried by a tensor of {data.dtype}")
    return data.numpy()  # (the tensor's shape) its bytes, as the array's dtype


def _array_scalar(value: dict) -> np.generic:
    if value["dtype"] not in _ARRAY_DTYPES:
        raise MalformedAnswer(f"a NumPy scalar's dtype {shown(value['dtype'])} is none of {', '.join(_ARRAY_DTYPES)}")
    dtype, number = np.dtype(value["dtype"]), value["value"]
    if type(number) is not _ITEM_TYPES[dtype.kind]:
        raise MalformedAnswer(f"a NumPy scalar of dtype {dtype} holds {shown(number)}")
    # NumPy 2 raises OverflowError on an integer out of the dtype's range
    if isinstance(number, int) and dtype.kind in "iu" and not np.iinfo(dtype).min <= number <= np.iinfo(dtype).max:
        raise MalformedAnswer(f"a NumPy scalar of dtype {dtype} holds {number}, out of its range")
    return dtype.type(number)


def _dict(value: dict, handle) -> dict:
    if len(value["keys"]) != len(value["values"]):
        raise MalformedAnswer(f"a dict has {len(value['keys'])} keys and {len(value['values'])} values")
    keys = [decode(k, handle) for k in value["keys"]]
    unhashable = [k for k in keys if not hashable(k)]
    if unhashable:
        raise MalformedAnswer(f"a dict has the key {shown(unhashable[0])}, which no dict can have")
    return dict(zip(keys, (decode(v, handle) for v in value["values"]), strict=True))


def load_reply(payload: bytes | memoryview, handle) -> tuple:
    """The learner process's reply to a request, read, decoded (``handle`` as for ``decode``) and
    checked: ``("ok", value)``, ``("missing", name)`` or ``("raise", error type name, text)``, as
    ``learner.Server`` sends them; MalformedAnswer on anything else."""
    reply = load_answer(payload)
    match reply:
        case ("ok", data) if type(reply) is tuple:
            return "ok", decode(data, handle)
        case ("missing", str()) | ("raise", str(), str()) if type(reply) is tuple:
            return reply
    raise MalformedAnswer(f"a reply is ('ok', value), ('missing', name) or ('raise', error, text), not {shown(reply)}")
