"""Frames through a real pipe: parts written as they lie in memory arrive whole and in order, an
answer's tensors are not the sender's memory, and a frame cut short is a closed channel."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
import torch

from bertlab.grading import wire


def _through_pipe(payload) -> memoryview:
    """``payload`` written by one thread and read as a frame by this one (a pipe holds 64 kB: the
    writer blocks and ``writev`` returns partial counts, as between the judge and the learner)."""
    read_fd, write_fd = os.pipe()
    writer = threading.Thread(target=wire.write_frame, args=(write_fd, payload))
    writer.start()
    try:
        return wire.read_frame(read_fd)
    finally:
        writer.join()
        os.close(read_fd)
        os.close(write_fd)


def test_many_parts_of_every_size_arrive_in_order():
    rng = np.random.default_rng(0)
    # More parts than one writev takes, empty ones among them, and some larger than the pipe.
    parts = [rng.integers(0, 256, size=n, dtype=np.uint8) for n in rng.integers(0, 3000, size=1500)]
    parts += [rng.integers(0, 256, size=300_000, dtype=np.uint8), b"", b"end"]
    got = _through_pipe(parts)
    assert bytes(got) == b"".join(bytes(p) for p in parts)


def test_a_write_the_system_cuts_short_goes_on_from_where_it_stopped(monkeypatch):
    """A pipe or socket may take part of what ``writev`` offers (a signal, a full buffer)."""
    writev = os.writev
    monkeypatch.setattr(wire.os, "writev", lambda fd, buffers: writev(fd, [memoryview(buffers[0])[:7]]))
    parts = [b"header", np.arange(50, dtype=np.uint8), b"", b"tail"]
    assert bytes(_through_pipe(parts)) == b"".join(bytes(p) for p in parts)


def test_an_answer_read_back_owns_its_tensors():
    sent = torch.randn(600, 384)  # (T, H): larger than the pipe
    got = wire.load_answer(_through_pipe(wire.answer_parts(("ok", sent, torch.arange(5)))))
    assert torch.equal(got[1], sent) and torch.equal(got[2], torch.arange(5))
    sent.zero_()  # the sender's memory changes after the write: the answer read keeps its values
    assert got[1].abs().sum() > 0


# A stride-0 expand, an empty tensor, a transpose.
LAYOUTS = [torch.zeros((), dtype=torch.int16).expand(1), torch.zeros(0, 3), torch.ones(2, 3).t()]


@pytest.mark.parametrize("tensor", LAYOUTS)
def test_a_tensor_of_any_layout_crosses_as_its_values(tensor):
    (got,) = wire.load_answer(wire.dump_answer((tensor,)))
    assert got.shape == tensor.shape and torch.equal(got, tensor)


def test_a_frame_cut_short_is_a_closed_channel():
    read_fd, write_fd = os.pipe()
    os.write(write_fd, (1000).to_bytes(8, "little") + b"only this")
    os.close(write_fd)
    with pytest.raises(wire.ChannelClosed):
        wire.read_frame(read_fd)
    os.close(read_fd)
