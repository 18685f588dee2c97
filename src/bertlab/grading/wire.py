"""What crosses between the judge and the learner's process, and how.

Frames are length-prefixed. The judge (trusted) sends pickles: the learner's process may load
them. The learner's process (untrusted) answers in plain data only: tensors, numbers, strings,
lists, tuples and tagged dicts, saved with ``torch.save`` and read back with
``torch.load(weights_only=True)``, which builds no object of the learner's choosing. Anything
that is not plain data (a class, a module, a function) stays in the learner's process and
crosses as a numbered handle with a description of its type.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import struct

import numpy as np
import torch

from bertlab.grading import course_parts

TAG = "__bertlab__"
MAX_FRAME = 1 << 31  # 2 GiB: a bigger answer is a runaway learner, not an output


READY = "ready"  # the learner process's first frame, once it is set up (see proxy.Learner._started)


class ChannelClosed(Exception):
    """The other process is gone (it exited, crashed or was killed)."""


def write_frame(fd: int, payload: bytes) -> None:
    data = struct.pack("<Q", len(payload)) + payload
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_exactly(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise ChannelClosed("the other process closed the channel")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> bytes:
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
    """Pickle ``message``; proxies (their ``id()`` a key of ``refs``) cross as their handle.

    ``pretrained`` (the reference model) crosses as a name: the learner's process has its own
    copy. Large tensors cross once per learner process (``sent``), then by key. Other modules
    cross without their hooks (transformers installs closures, which do not pickle, to record
    outputs; a module sent to the learner never needs them). transformers' own modules and
    configs cross as the course's counterparts (``course_parts``): the learner's process cannot
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
            course = course_parts.reduce(obj, _as_module)
            if course is not None:
                return course
            if isinstance(obj, nn.Module) and type(obj) is not type:
                return _as_module(type(obj), obj)
            return NotImplemented

    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(message)
    tensors = dump_answer((list(new), list(new.values())))
    return struct.pack("<Q", len(tensors)) + tensors + buffer.getvalue()


def load_request(payload: bytes, objects: dict[int, object], pretrained=None, held: dict | None = None):
    """Inverse of ``dump_request``; ``pretrained()`` gives a fresh copy of the reference model.

    ``held`` is the learner's side of ``SentTensors``: every request gets its own copies, so
    nothing a learner's call does to an input reaches the next call; a lent tensor (``lend``) is
    the held one itself, for requests that only read their inputs.
    """
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
        return value.detach().cpu().as_subclass(torch.Tensor).contiguous().clone()
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
    """``message`` (plain data from ``encode``) as a JSON header and the tensors' bytes."""
    buffers: list[bytes] = []
    tensors: list[dict] = []

    def tree(value):
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, torch.Tensor):
            dtype = str(value.dtype).removeprefix("torch.")
            if dtype not in _DTYPES:
                raise ValueError(f"a tensor of dtype {dtype} cannot be sent")
            data = value.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if value.numel() else b""
            tensors.append({"dtype": dtype, "shape": list(value.shape), "nbytes": len(data)})
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
    return struct.pack("<Q", len(header)) + header + b"".join(buffers)


def load_answer(payload: bytes):
    """Inverse of ``dump_answer``; ValueError on anything malformed."""
    (size,) = struct.unpack("<Q", payload[:8])
    header = json.loads(payload[8 : 8 + size])
    offset, tensors = 8 + size, []
    for spec in header["tensors"]:
        dtype, shape, nbytes = _DTYPES[spec["dtype"]], [int(n) for n in spec["shape"]], int(spec["nbytes"])
        count = 1
        for n in shape:
            count *= n
        if min(shape, default=0) < 0 or nbytes != count * dtype.itemsize or offset + nbytes > len(payload):
            raise ValueError("malformed tensor in the learner's answer")
        data = bytearray(payload[offset : offset + nbytes])
        tensors.append(torch.frombuffer(data, dtype=dtype).reshape(shape) if count else torch.empty(shape, dtype=dtype))
        offset += nbytes

    def value(node):
        if isinstance(node, list):
            return [value(v) for v in node]
        if isinstance(node, dict):
            if "x" in node:
                return tensors[node["x"]]
            if "t" in node:
                return tuple(value(v) for v in node["t"])
            return {k: value(v) for k, v in node["d"].items()}
        return node

    return value(header["value"])


def decode(value, handle):
    """Inverse of ``encode``; ``handle(description) -> proxy`` for kept objects."""
    if isinstance(value, tuple):
        return tuple(decode(v, handle) for v in value)
    if isinstance(value, list):
        return [decode(v, handle) for v in value]
    if isinstance(value, dict) and TAG in value:
        kind = value[TAG]
        if kind == "ndarray":
            return value["data"].numpy().astype(np.dtype(value["dtype"]), copy=False)
        if kind == "npscalar":
            return np.dtype(value["dtype"]).type(value["value"])
        if kind == "dict":
            return dict(
                zip(
                    (decode(k, handle) for k in value["keys"]),
                    (decode(v, handle) for v in value["values"]),
                    strict=True,
                )
            )
        if kind == "handle":
            return handle(value)
    if isinstance(value, dict):  # only tagged dicts are sent: anything else is malformed
        raise ValueError("malformed answer from the learner's process")
    return value
