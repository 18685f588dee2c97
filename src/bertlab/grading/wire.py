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
import os
import pickle
import struct

import numpy as np
import torch

TAG = "__bertlab__"
MAX_FRAME = 1 << 31  # 2 GiB: a bigger answer is a runaway learner, not an output


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


_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
          "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs", "_forward_hooks_always_called",
          "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
          "_load_state_dict_post_hooks")


def _module_without_hooks(cls):
    return cls.__new__(cls)


def dump_request(message, refs: dict[int, int], pretrained=None) -> bytes:
    """Pickle ``message``; proxies (their ``id()`` a key of ``refs``) cross as their handle.

    ``pretrained`` (the reference model) crosses as a name: the learner's process has its own
    copy. Other modules cross without their hooks (transformers installs closures, which do
    not pickle, to record outputs; a module sent to the learner never needs them).
    """
    from torch import nn

    class _Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            if pretrained is not None and obj is pretrained:
                return ("pretrained",)
            handle = refs.get(id(obj))
            return None if handle is None else ("ref", handle)

        def reducer_override(self, obj):
            if isinstance(obj, nn.Module) and type(obj) is not type:
                state = dict(obj.__dict__)
                for name in _HOOKS:
                    if name in state:
                        state[name] = type(state[name])()
                return _module_without_hooks, (type(obj),), state
            return NotImplemented

    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(message)
    return buffer.getvalue()


def load_request(payload: bytes, objects: dict[int, object], pretrained=None):
    """Inverse of ``dump_request``; ``pretrained()`` gives a fresh copy of the reference model."""

    class _Unpickler(pickle.Unpickler):
        def persistent_load(self, pid):
            if pid[0] == "pretrained":
                return pretrained()
            return objects[pid[1]]

    return _Unpickler(io.BytesIO(payload)).load()


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
        return {TAG: "dict", "keys": [encode(k, keep) for k in value], "values": [encode(v, keep) for v in value.values()]}
    return keep(value)


def dump_answer(message) -> bytes:
    buffer = io.BytesIO()
    torch.save(message, buffer)
    return buffer.getvalue()


def load_answer(payload: bytes):
    return torch.load(io.BytesIO(payload), weights_only=True)


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
            return dict(zip((decode(k, handle) for k in value["keys"]), (decode(v, handle) for v in value["values"])))
        if kind == "handle":
            return handle(value)
    if isinstance(value, dict):  # only tagged dicts are sent: anything else is malformed
        raise ValueError("malformed answer from the learner's process")
    return value
