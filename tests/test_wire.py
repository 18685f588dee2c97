"""What crosses to the learner's process: large tensors once, then by key, never shared between calls.
What comes back: whatever bytes the learner's process sends, the judge reads plain data or refuses
them with a MalformedAnswer (property tests, below)."""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertlab.grading import learner, wire


def _roundtrip(message, sent, held):
    payload = wire.dump_request(message, {}, None, sent)
    return payload, wire.load_request(payload, {}, None, held)


def test_a_large_tensor_crosses_once_then_by_key():
    sent, held = wire.SentTensors(), {}
    weight = torch.randn(256, 256)
    first, got = _roundtrip(("invoke", weight), sent, held)
    again, got_again = _roundtrip(("invoke", weight.detach()), sent, held)  # a fresh view, same memory
    assert len(again) < weight.nbytes / 10 < len(first)
    assert torch.equal(got[1], weight) and torch.equal(got_again[1], weight)


def test_every_request_gets_its_own_copy():
    sent, held = wire.SentTensors(), {}
    weight = torch.randn(256, 256)
    _, got = _roundtrip(("invoke", weight), sent, held)
    got[1].zero_()  # what a learner's in-place call does to its input
    _, got_again = _roundtrip(("invoke", weight), sent, held)
    assert torch.equal(got_again[1], weight)


def test_a_lent_tensor_is_the_held_one_and_only_that_request_gets_it():
    sent, held = wire.SentTensors(), {}
    weight = torch.randn(256, 256)
    _, got = _roundtrip(("invoke", weight), sent, held)  # the first request copies, as every other
    lent = wire.load_request(wire.dump_request(("load_weights", weight), {}, None, sent, lend=True), {}, None, held)
    (key,) = held
    assert lent[1].data_ptr() == held[key].data_ptr() != got[1].data_ptr()
    assert torch.equal(lent[1], weight) and not lent[1].requires_grad
    _, after = _roundtrip(("invoke", weight), sent, held)
    assert after[1].data_ptr() != held[key].data_ptr()


def test_a_tensor_sent_as_an_array_crosses_once_and_each_request_gets_its_own_array():
    import numpy as np

    from bertlab.checks.harness import AsArray

    sent, held = wire.SentTensors(), {}
    weight = torch.randn(256, 256)
    first, got = _roundtrip({"params": {"w": AsArray(weight)}}, sent, held)
    again, got_again = _roundtrip({"params": {"w": AsArray(weight)}}, sent, held)
    assert len(first) > weight.nbytes > 50 * len(again)  # the second request names it by key
    array, array_again = got["params"]["w"], got_again["params"]["w"]
    assert isinstance(array, np.ndarray) and array.dtype == np.float32 and np.array_equal(array, weight.numpy())
    array_again[0, 0] = 1e9  # the learner's code writes to its array: the next request's is intact
    assert np.array_equal(_roundtrip({"w": AsArray(weight)}, sent, held)[1]["w"], weight.numpy())


def test_a_tensor_changed_in_place_is_sent_again():
    sent, held = wire.SentTensors(), {}
    weight = torch.randn(256, 256)
    _roundtrip(("invoke", weight), sent, held)
    weight.mul_(2)
    payload, got = _roundtrip(("invoke", weight), sent, held)
    assert len(payload) > weight.nbytes and torch.equal(got[1], weight)


def test_parameters_and_grad_flags_survive():
    sent, held = wire.SentTensors(), {}
    weight = torch.nn.Parameter(torch.randn(256, 256))
    grad_input = torch.randn(128, 256, requires_grad=True)
    _, (param, tensor, same) = _roundtrip((weight, grad_input, grad_input), sent, held)
    assert isinstance(param, torch.nn.Parameter) and param.requires_grad
    assert type(tensor) is torch.Tensor and tensor.requires_grad and tensor.is_leaf
    assert same is tensor  # one object per key within a request, as pickle keeps it


def test_a_sparse_tensor_crosses_whole():
    sent, held = wire.SentTensors(), {}
    _, got = _roundtrip(("invoke", torch.eye(3).to_sparse()), sent, held)
    assert got[1].is_sparse and torch.equal(got[1].to_dense(), torch.eye(3))


def test_answers_are_plain_data_both_ways():
    tensors = [
        torch.randn(3, 4),
        torch.arange(6).reshape(2, 3),
        torch.tensor([True, False]),
        torch.empty(0, 5),
        torch.randn(2, dtype=torch.float64),
        torch.tensor(1.5, dtype=torch.bfloat16),
    ]
    message = ("ok", {wire.TAG: "dict", "keys": ["a", 1], "values": [tensors, (None, 2.5, float("inf"))]})
    got = wire.load_answer(wire.dump_answer(message))
    assert got[0] == "ok" and got[1]["keys"] == ["a", 1] and got[1]["values"][1] == (None, 2.5, float("inf"))
    for sent, back in zip(tensors, got[1]["values"][0], strict=True):
        assert back.dtype == sent.dtype and back.shape == sent.shape and torch.equal(back, sent)


def test_an_answer_that_is_not_plain_data_is_refused():
    with pytest.raises(ValueError):
        wire.dump_answer(("ok", object()))
    payload = bytearray(wire.dump_answer(("ok", torch.zeros(4))))
    with pytest.raises(ValueError):
        wire.load_answer(bytes(payload[:-4]))  # a tensor's bytes cut short


# -- what the judge reads from the learner's process: anything malformed is a MalformedAnswer ----
#
# The learner's process runs the learner's code and owns its end of the pipe: whatever bytes it
# sends, the judge's readers return plain data or raise MalformedAnswer (a ValueError), never
# another exception. Hypothesis draws valid answers (from the module's own encoder), breaks one
# field of each, and feeds random bytes: 150 examples a test, a second or two each.

PROPERTY = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

TENSOR_DTYPES = list(wire._DTYPES.values())  # every dtype an answer may carry
ARRAY_DTYPES = [np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64]


@st.composite
def tensors(draw) -> torch.Tensor:
    """A small tensor of any dtype an answer may hold, its contents from a drawn seed."""
    dtype = draw(st.sampled_from(TENSOR_DTYPES))
    shape = draw(st.lists(st.integers(0, 3), max_size=3))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()  # shape
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=generator, dtype=dtype)  # shape
    return torch.randint(0, 100, shape, generator=generator, dtype=dtype)  # shape


@st.composite
def arrays(draw) -> np.ndarray:
    shape = draw(st.lists(st.integers(0, 3), max_size=3))
    values = np.random.default_rng(draw(st.integers(0, 2**31 - 1))).standard_normal(shape) * 10  # shape
    return values.astype(draw(st.sampled_from(ARRAY_DTYPES)))


def scalars() -> st.SearchStrategy:
    """NumPy scalars as a learner's numpy code returns them."""
    return st.one_of(
        st.booleans().map(np.bool_),
        st.integers(-128, 127).map(np.int8),
        st.integers(0, 255).map(np.uint8),
        st.integers(-(2**63), 2**63 - 1).map(np.int64),
        # no NaN: JSON keeps no NaN's sign or payload, and a scalar crosses as a JSON number
        st.floats(width=16, allow_nan=False).map(np.float16),
        st.floats(width=32, allow_nan=False).map(np.float32),
        st.floats(allow_nan=False).map(np.float64),
    )


PLAIN_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=6),
    tensors(),
)


TEXT_KEYS = st.text(max_size=4)


def plain(leaves: st.SearchStrategy = PLAIN_LEAVES, keys: st.SearchStrategy = TEXT_KEYS):
    """Nested lists, tuples and dicts of ``leaves``."""
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.lists(inner, max_size=3).map(tuple),
            st.dictionaries(keys, inner, max_size=3),
        ),
        max_leaves=8,
    )


class Kept:
    """What a test's ``handle`` makes of a kept object's description (a proxy, in the judge)."""

    def __init__(self, description: dict):
        self.description = description


# Objects that stay in the learner's process, described as its server describes them.
OPAQUE = [object(), len, torch.nn.Linear(2, 2), torch.nn.Module, type("BertLayer", (torch.nn.Module,), {})()]


def keep(obj) -> dict:
    if isinstance(obj, Kept):
        return obj.description
    return {wire.TAG: "handle", "id": OPAQUE.index(obj) + 1, "meta": learner._describe(obj)}


def learner_values() -> st.SearchStrategy:
    """What a learner's process answers with: plain data, arrays, NumPy scalars, dicts of any
    hashable keys and objects it keeps."""
    leaves = PLAIN_LEAVES | arrays() | scalars() | st.sampled_from(OPAQUE)
    return plain(leaves, keys=st.text(max_size=4) | st.integers(-3, 3) | st.tuples(st.integers(0, 2)))


def replies() -> st.SearchStrategy:
    """Replies as ``learner.Server`` sends them, encoded; most hold every kind of tagged dict."""
    every_kind = st.tuples(arrays(), scalars(), st.sampled_from(OPAQUE), st.dictionaries(st.integers(0, 3), st.none()))
    return st.one_of(
        st.tuples(learner_values(), every_kind).map(lambda value: ("ok", wire.encode(value, keep))),
        learner_values().map(lambda value: ("ok", wire.encode(value, keep))),
        st.tuples(st.just("missing"), st.text(max_size=6)),
        st.tuples(st.just("raise"), st.sampled_from(["KeyError", "AttributeError", "X"]), st.text(max_size=6)),
    )


def same(a, b) -> bool:
    """``a`` and ``b`` are equal, bit for bit (NaN included), and of the same types throughout."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        bits = [t.reshape(-1).view(torch.uint8) for t in (a, b)]
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(*bits)
    if isinstance(a, (np.ndarray, np.generic)):
        return a.dtype == b.dtype and np.shape(a) == np.shape(b) and a.tobytes() == b.tobytes()
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return len(a) == len(b) and all(same(ka, kb) and same(a[ka], b[kb]) for ka, kb in zip(a, b, strict=True))
    if isinstance(a, Kept):
        return same(a.description, b.description)
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def loads_or_refuses(payload: bytes) -> None:
    """``payload`` either is refused with a MalformedAnswer or loads to what a valid answer (the
    encoder's own, of that value) loads to."""
    try:
        value = wire.load_answer(payload)
    except wire.MalformedAnswer:
        return
    assert same(wire.load_answer(wire.dump_answer(value)), value)


def replies_or_refuses(payload: bytes) -> None:
    """The same for a whole reply, decoded: the value is one the encoder sends too."""
    try:
        reply = wire.load_reply(payload, Kept)
    except wire.MalformedAnswer:
        return
    valid = reply if reply[0] != "ok" else ("ok", wire.encode(reply[1], keep))
    assert same(wire.load_reply(wire.dump_answer(valid), Kept), reply)


# -- breaking one field of a valid answer ----------------------------------------------------------


def split(payload: bytes) -> tuple[object, bytes]:
    """A valid answer's JSON header and the tensors' bytes after it."""
    (size,) = struct.unpack("<Q", payload[:8])
    return json.loads(payload[8 : 8 + size]), payload[8 + size :]


def joined(header, data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def places(node, path: tuple = ()) -> list[tuple]:
    """The path of every value in a JSON tree below its root (keys and indices from the root),
    the deepest first: hypothesis draws the first ones most, and a broken leaf tests the most."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            found += [*places(value, (*path, key)), (*path, key)]
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += [*places(value, (*path, index)), (*path, index)]
    return sorted(found, key=len, reverse=True) if not path else found


def at(node, path: tuple):
    for step in path:
        node = node[step]
    return node


# Values a broken field takes: other types, other dtypes, tags and node kinds, sizes off by one
# or far off, keys of other nodes.
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 8),
    st.integers(-(2**65), 2**65),
    st.floats(),
    st.text(max_size=3),
    st.sampled_from(
        [
            *("float32", "bfloat16", "bool", "int64", "complex64", "uint16", "float33", "", "x", "t", "d"),
            *(wire.TAG, "ndarray", "npscalar", "dict", "handle", "ok", "raise", "missing", "<f4", "|b1", "<i8", "O"),
        ]
    ),
    st.lists(st.integers(-1, 5), max_size=3),
    st.dictionaries(st.sampled_from(["x", "t", "d", "dtype", "shape", "nbytes", wire.TAG]), st.integers(-1, 3)),
)


@st.composite
def broken_header(draw, header):
    """``header`` with one value replaced, or one key removed or renamed, or one item removed or
    repeated."""
    header = json.loads(json.dumps(header))  # a copy
    path = draw(st.sampled_from(places(header)))  # the header is a dict: it has places
    parent, last = at(header, path[:-1]), path[-1]
    how = draw(st.sampled_from(["replace", "remove", "rename", "repeat"]))
    if how == "replace" or (how == "repeat" and isinstance(parent, dict)):
        parent[last] = draw(JUNK)
    elif how == "remove":
        del parent[last]
    elif how == "rename" and isinstance(parent, dict):
        name = draw(st.text(max_size=3) | st.sampled_from(["x", "t", "d", wire.TAG, "dtype", "shape", "nbytes"]))
        parent[name] = parent.pop(last)
    elif isinstance(parent, list):
        parent.insert(last, parent[last])
    return header


@st.composite
def broken(draw, payloads: st.SearchStrategy) -> bytes:
    """A valid answer with one thing broken: a field of its header, its length, or its bytes."""
    payload = draw(payloads)
    header, data = split(payload)
    how = draw(st.sampled_from(["field"] * 6 + ["cut", "extend", "length", "byte"]))
    if how == "field":
        return joined(draw(broken_header(header)), data)
    if how == "cut":
        return payload[: draw(st.integers(0, len(payload) - 1))]
    if how == "extend":
        return payload + draw(st.binary(min_size=1, max_size=9))
    if how == "length":
        return struct.pack("<Q", draw(st.integers(0, 2**64 - 1))) + payload[8:]
    index = draw(st.integers(0, len(payload) - 1))
    return payload[:index] + bytes([draw(st.integers(0, 255))]) + payload[index + 1 :]


ANSWERS = (st.tuples(plain(), tensors(), plain()) | plain()).map(wire.dump_answer)  # most with a tensor
REPLIES = replies().map(wire.dump_answer)


@PROPERTY
@given(st.binary(max_size=64) | st.binary(min_size=8, max_size=64).map(lambda b: struct.pack("<Q", len(b)) + b))
def test_random_bytes_are_refused_with_a_malformed_answer(payload):
    with pytest.raises(wire.MalformedAnswer):
        wire.load_answer(payload)
    with pytest.raises(wire.MalformedAnswer):
        wire.load_reply(payload, Kept)


@PROPERTY
@given(broken(ANSWERS))
def test_a_broken_answer_is_refused_or_loads_to_valid_data(payload):
    loads_or_refuses(payload)


@PROPERTY
@given(broken(REPLIES))
def test_a_broken_reply_is_refused_or_decodes_to_a_valid_one(payload):
    replies_or_refuses(payload)


@PROPERTY
@given(plain())
def test_valid_answers_load_back_equal(message):
    assert same(wire.load_answer(wire.dump_answer(message)), message)


def _kept(value):
    """``value`` as the judge sees it: the objects the learner's process keeps as their handles."""
    if isinstance(value, (list, tuple)):
        return type(value)(_kept(v) for v in value)
    if isinstance(value, dict):
        return {_kept(k): _kept(v) for k, v in value.items()}
    if any(value is obj for obj in OPAQUE):
        return Kept(keep(value))
    if isinstance(value, np.float64):  # a float subclass: it crosses as a float
        return float(value)
    return value


@PROPERTY
@given(learner_values())
def test_valid_replies_decode_back_to_what_was_sent(value):
    status, got = wire.load_reply(wire.dump_answer(("ok", wire.encode(value, keep))), Kept)
    assert status == "ok" and same(got, _kept(value))
