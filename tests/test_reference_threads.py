"""The course's reference modules refuse learner code on every thread, not only the checked one.

Issue: a forward that built the course's own BertSelfAttention (``bertlab.bert``, what a graded
notebook's process holds instead of transformers) and ran it on a ``ThreadPoolExecutor`` thread
earned full marks, since the profile watch that refuses reference code is set per thread. The
course's modules now refuse, while a check calls learner code, any call that is not the grader's
part, whatever thread makes it (``bertlab.given_parts``). The wrong forms below are written as a
learner would hide the call, independently of the checks; the right forms use threads too, for
their own code or for the part the grader gave, and must still pass.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import torch
from torch import nn

from bertlab import bert
from bertlab.checks import CheckFailed, check
from bertlab.checks.harness import given, invoke
from tests.conftest import solution_namespace

NB03 = solution_namespace("03-self-attention")
NB06 = solution_namespace("06-bert-model")
BertSelfAttention: Any = NB03["BertSelfAttention"]
BertLayer: Any = NB06["BertLayer"]


def course_twin(module: nn.Module, config) -> nn.Module:
    """The course's BertSelfAttention holding ``module``'s weights (what the shortcut runs)."""
    twin = bert.BertSelfAttention(config)
    twin.load_state_dict(module.state_dict())
    return twin.train(module.training)


class OnAPool(BertSelfAttention):
    """Wrong: builds and calls the course's module on a ThreadPoolExecutor's thread."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        def run():
            return course_twin(self, self.config)(hidden_states, attention_mask, **kwargs)

        with ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(run).result()


class OnAThread(BertSelfAttention):
    """Wrong: a threading.Thread of its own, its answer handed back in a list."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        answer: list = []
        twin = course_twin(self, self.config)
        worker = threading.Thread(target=lambda: answer.append(twin(hidden_states, attention_mask, **kwargs)))
        worker.start()
        worker.join()
        return answer[0]


_requests: queue.Queue = queue.Queue()


def _serve() -> None:
    while True:
        twin, args, kwargs, answer = _requests.get()
        try:
            answer.put(twin(*args, **kwargs))
        except Exception as err:  # noqa: BLE001  (handed back to the caller, as a learner's helper would)
            answer.put(err)


# Started when the notebook's cell runs, long before any check: a worker that serves forever.
threading.Thread(target=_serve, daemon=True).start()


class OnAWorkerStartedBefore(BertSelfAttention):
    """Wrong: sends each call to a worker thread started before the check, which runs the course's module."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        answer: queue.Queue = queue.Queue()
        _requests.put((course_twin(self, self.config), (hidden_states, attention_mask), kwargs, answer))
        got = answer.get()
        if isinstance(got, Exception):
            return super().forward(hidden_states, attention_mask, **kwargs)  # refused: its own, as a fallback
        return got


class RefusalCaught(BertSelfAttention):
    """Wrong: tries the course's module on a pool thread and swallows a refusal, falling back on
    its own forward: the attempt alone is the shortcut."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        with ThreadPoolExecutor(max_workers=1) as pool:
            try:
                return pool.submit(course_twin(self, self.config), hidden_states, attention_mask, **kwargs).result()
            except Exception:  # noqa: BLE001
                return super().forward(hidden_states, attention_mask, **kwargs)


class OnTorchFork(BertSelfAttention):
    """Wrong: torch's own futures (``torch.jit.fork``) run the course's module."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        future = torch.jit.fork(course_twin(self, self.config), hidden_states, attention_mask)
        return torch.jit.wait(future)


@pytest.mark.parametrize(
    "cls", [OnAPool, OnAThread, OnAWorkerStartedBefore, RefusalCaught, OnTorchFork], ids=lambda c: c.__name__
)
def test_the_course_module_run_on_any_thread_is_refused(cls):
    with pytest.raises(CheckFailed, match=r"calls the course's reference BertSelfAttention.*yourself"):
        check("3.2", cls, upto="values")


class OwnCodeOnAPool(BertSelfAttention):
    """Right: the learner's own forward, run on a worker thread (a harmless use of a pool)."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        with ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(super().forward, hidden_states, attention_mask, **kwargs).result()


def test_the_learners_own_code_on_a_pool_passes(capsys):
    check("3.2", OwnCodeOnAPool)
    assert "[Task 3.2] BertSelfAttention passed" in capsys.readouterr().out


@pytest.mark.parametrize("marked", [True, False], ids=["given", "taken"])
def test_a_part_the_grader_gave_runs_on_any_thread(marked):
    """The course's parts, as a graded notebook's process holds them: the grader's own part may be
    called on a worker thread (its children too); the same module not given is refused there."""
    config = bert.load_config()
    attention = bert.BertAttention(config).eval()
    if marked:
        given(attention)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.parts = [attention]  # out of sight of the module's own children (what a check reads first)

        def forward(self, hidden_states):
            with ThreadPoolExecutor(max_workers=2) as pool:
                context = pool.submit(self.parts[0].self, hidden_states).result()[0]
                return pool.submit(self.parts[0].output, context, hidden_states).result()

    outcome = invoke(Layer(), (torch.randn(1, 3, config.hidden_size),), forbid_shortcuts=True)
    assert outcome.kind == ("ok" if marked else "shortcut"), outcome
    if not marked:
        assert "on a thread of its own" in outcome.shortcut, outcome.shortcut


def test_outside_a_check_the_course_modules_run_anywhere():
    """A notebook's own cells (plots, experiments) run the course's model freely, threads included."""
    config = bert.load_config()
    module = bert.BertIntermediate(config).eval()
    x = torch.randn(1, 2, config.hidden_size)
    with ThreadPoolExecutor(max_workers=1) as pool:
        assert torch.equal(pool.submit(module, x).result(), module(x))
