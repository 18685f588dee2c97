"""What crosses to the learner's process: large tensors once, then by key, never shared between calls."""

from __future__ import annotations

import torch

from bertlab.grading import wire


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
    import pytest

    with pytest.raises(ValueError):
        wire.dump_answer(("ok", object()))
    payload = bytearray(wire.dump_answer(("ok", torch.zeros(4))))
    with pytest.raises(ValueError):
        wire.load_answer(bytes(payload[:-4]))  # a tensor's bytes cut short
