"""The verdict is made outside the learner's process: what a learner cell does there cannot pass a
wrong solution, and a learner call cannot change the grader's own activations."""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bertlab import capture
from bertlab.checks import CheckFailed, check, compare
from bertlab.checks.harness import Outcome
from bertlab.grading import proxy, wire
from bertlab.grading.execute import run_notebook
from bertlab.grading.tamper import scan
from tests.conftest import solution_namespace, solution_notebook

pytestmark = pytest.mark.slow

# Written so the static scan cannot see it (built from strings): only the judge stands in the way.
HIDDEN_TAMPER = """
exec("import bertlab" + ".checks as c\\nc.check = lambda *a, **k: None\\nglobals()['ch' + 'eck'] = c.check")
exec("import torch\\ntorch.allclose = lambda *a, **k: True\\ntorch.equal = lambda *a, **k: True")
"""


def relu_feed_forward_with(cell_source: str):
    """Notebook 05's solution with ReLU instead of GELU in Task 5.1, and ``cell_source`` after it."""
    nb = nbformat.read(solution_notebook("05-feed-forward"), as_version=4)
    ((index, cell),) = [
        (i, c) for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "bert-intermediate"
    ]
    assert "ACT2FN" in cell.source or "gelu" in cell.source.lower()
    cell.source = (
        cell.source
        + "\n\nBertIntermediate.forward = lambda self, hidden_states: torch.relu(self.dense(hidden_states))\n"
    )
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(cell_source))
    return nb


def test_hidden_tampering_cannot_pass_a_wrong_solution():
    nb = relu_feed_forward_with(HIDDEN_TAMPER)
    assert scan(nb) is None, "this test is about what the static scan misses"
    result = run_notebook(nb)
    task_5_1 = [c for c in result.checks if c.name.startswith("test-5-1")]
    assert task_5_1 and not any(c.passed for c in task_5_1[1:]), [c.message for c in task_5_1]
    assert any("values differ" in c.message for c in task_5_1)
    # Task 5.2 is right and still passes: the judge's own comparisons were never patched.
    assert all(c.passed for c in result.checks if c.name.startswith("test-5-2"))


def test_visible_tampering_scores_zero_with_the_reason():
    nb = relu_feed_forward_with("check = lambda *args, **kwargs: None\n")
    result = run_notebook(nb)
    assert result.checks and all(not c.passed and c.points == 0 for c in result.checks)
    assert all("changes the grader" in c.message and "rebinds `check`" in c.message for c in result.checks)


def _snapshot() -> dict[str, torch.Tensor]:
    cap = capture.capture()
    tensors = {}
    for layer in range(len(cap.hidden_states) - 1):
        call = cap.layer(layer, "attention.output")
        tensors[f"{layer}.attention.output.args"] = torch.stack([a.clone() for a in call.args])
        tensors[f"{layer}.attention.output.output"] = call.output.clone()
    tensors["hidden_states"] = torch.stack([h.clone() for h in cap.hidden_states])
    return tensors


def test_captured_activations_survive_in_place_learners():
    """Every learner call gets copies: an in-place forward fails, naming the argument, and the
    capture that later checks compare with is exactly as before."""
    learner = solution_namespace("04-attention-output")

    class InPlaceSelfOutput(learner["BertSelfOutput"]):
        def forward(self, hidden_states, input_tensor):
            input_tensor += self.dropout(self.dense(hidden_states))  # the bug: changes the caller's tensor
            hidden_states.mul_(0)
            return self.LayerNorm(input_tensor)

    before = _snapshot()
    with pytest.raises(CheckFailed) as failure:
        check("4.1", InPlaceSelfOutput)
    message = str(failure.value)
    assert "changed its argument `hidden_states`, `input_tensor` in place" in message
    assert "known mistake" not in message, "an in-place change must not be diagnosed as another mistake"
    after = _snapshot()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    check("4.1", learner["BertSelfOutput"])  # the right class still passes against the same capture


def test_learner_code_writes_only_in_its_own_folder(tmp_path):
    """A learner cell cannot rewrite the grader's code or other files: the write is refused, grading goes on."""
    from bertlab.grading.platforms.linux import landlock

    if landlock.abi() < 1:
        pytest.skip("this kernel has no Landlock: the known limit on the honest-grading page applies")
    work, outside = tmp_path / "work", tmp_path / "outside.txt"
    work.mkdir()
    outside.write_text("the grader's file")
    attempt = (
        f"for path in [{str(outside)!r}, __import__('bertlab.checks.compare').checks.compare.__file__]:\n"
        f"    try:\n        open(path, 'a').write('# patched')\n    except PermissionError:\n        pass\n"
        f"open('mine.txt', 'w').write('allowed')\n"
    )
    nb = nbformat.read(solution_notebook("05-feed-forward"), as_version=4)
    nb.cells.insert(1, nbformat.v4.new_code_cell(attempt))
    grader = Path(compare.__file__)
    original = grader.read_text()
    try:
        result = run_notebook(nb, timeout=300, cwd=str(work))
        assert grader.read_text() == original, "the learner's cell rewrote the grader's source"
    finally:
        grader.write_text(original)
    assert outside.read_text() == "the grader's file"
    assert (work / "mine.txt").read_text() == "allowed"
    assert result.checks and all(c.passed for c in result.checks), [c.message for c in result.checks]


MEMORY_PROBE = """
import json, sys, nbformat
from bertlab import capture
from bertlab.grading.execute import run_notebook

def rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS:"))

capture.capture()  # what a warm worker holds before its first notebook
seen = {"before": rss(), "after": [], "passed": []}
for _ in range(2):
    # the memory is measured, not the speed: a slow CPU (ATEN_CPU_CAPABILITY=default) gets the time it needs
    graded = run_notebook(nbformat.read(sys.argv[1], as_version=4), timeout=1800)
    seen["passed"].append(all(c.passed for c in graded.checks))
    seen["after"].append(rss())
import gc
from bertlab.grading.proxy import Learner
gc.collect()
seen["learners_alive"] = sum(isinstance(o, Learner) for o in gc.get_objects())
print(json.dumps(seen))
"""


@pytest.mark.timeout(3600)  # two notebooks graded: minutes each where the CPU runs torch's plain kernels
@pytest.mark.parametrize("name", ["06-bert-model", "07-why-measured"])
def test_a_warm_judge_does_not_grow_notebook_after_notebook(tmp_path, name):
    """A judge grades notebook after notebook (the warm workers of bertlab grade, bertlab judges
    and autograde). The notebooks whose checks keep things between calls, graded twice: what stays
    resident after the first is bounded (the parts' kept copies, the random models: about the
    model's size), it does not grow with the second, and no learner's process is still referred
    to. Before, each 06 moved 3 GB across the pipe and the allocator kept it (1.3 GB more after one
    notebook, 8-10 GB after a few dozen), and each 07 left 174 MB behind: its checks kept every
    learner function they had called, and the random models those calls were sent."""
    import json
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    proc = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, str(solution_notebook(name))],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["passed"] == [True, True]
    assert seen["after"][0] - seen["before"] <= 400, seen
    assert seen["after"][-1] - seen["after"][0] <= 32, seen
    assert seen["learners_alive"] == 0, seen


def test_a_load_that_writes_to_the_weights_it_was_given_fails_and_changes_nothing_after_it():
    """Loading reads the tensors the learner's process holds, not copies: a module whose loading
    writes to them fails, and the next check still gets the pretrained weights."""
    nb = nbformat.read(solution_notebook("05-feed-forward"), as_version=4)
    nb.cells = [c for c in nb.cells if not c.metadata.get("nbgrader", {}).get("grade")]
    nb.cells.append(
        nbformat.v4.new_code_cell(
            "class Doubling(BertIntermediate):\n"
            "    def _load_from_state_dict(self, state_dict, prefix, *args):\n"
            "        state_dict[prefix + 'dense.weight'].mul_(2)\n"
            "        super()._load_from_state_dict(state_dict, prefix, *args)\n"
        )
    )
    for name, cls in (("doubling", "Doubling"), ("right-after", "BertIntermediate")):
        nb.cells.append(
            nbformat.v4.new_code_cell(
                f'check("5.1", {cls}, upto="values")',
                metadata={"nbgrader": {"grade": True, "grade_id": name, "points": 1}},
            )
        )
    doubling, right_after = run_notebook(nb).checks
    assert not doubling.passed and "changed the weights it was given" in doubling.message, doubling.message
    assert right_after.passed, right_after.message


def _graded_cell(source: str, grade_id: str):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": grade_id, "points": 1, "solution": False, "locked": True}
    return cell


def test_a_notebook_that_changes_the_preloaded_model_changes_it_for_itself_only():
    """The learner processes are forks of a template that has loaded the pretrained model (their
    ``load_model()`` costs nothing): one notebook zeroing its weights leaves the next one's intact."""
    load = "from bertlab.reference import load_model\nweight = load_model().embeddings.word_embeddings.weight\n"
    spoiler = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(load + "weight.data.zero_()\nzeroed = bool(weight.abs().sum() == 0)"),
            _graded_cell("assert zeroed", "zeroed"),
        ]
    )
    after = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(load + "intact = bool(weight.abs().sum() > 0)"),
            _graded_cell("assert intact", "intact"),
        ]
    )
    for nb in (spoiler, after, after):
        result = run_notebook(nb)
        assert [c.passed for c in result.checks] == [True], [c.message for c in result.checks]


# -- a learner's process that sends what the grader cannot read --------------------------------

# A learner cell that writes frames of its own to the grader's pipe (its server's answer end,
# found without naming the grader's modules): the judge reads them as its answers.
SEND_FRAMES = """
import gc, json, os, struct

def send_frame(payload):
    server = next(o for o in gc.get_objects() if type(o).__name__ == "Server" and hasattr(o, "answer_fd"))
    os.write(server.answer_fd, struct.pack("<Q", len(payload)) + payload)

def send(header, data=b""):  # an answer: its JSON header, then its tensors' bytes
    text = json.dumps(header).encode()
    send_frame(struct.pack("<Q", len(text)) + text + data)
"""
ODD_DTYPE = {"value": {"t": ["ok", {"x": 0}]}, "tensors": [{"dtype": "float33", "shape": [1], "nbytes": 4}]}


@pytest.mark.parametrize(
    ("cell", "grade_cell", "cause"),
    [
        ("send_frame(struct.pack('<Q', 8) + b'not json')", "assert True", "its header is not JSON"),
        ("send({'value': {'t': ['ok', 5]}, 'tensors': []})", "assert True", "its report of a cell is 5, not a dict"),
        (
            f"def odd(x):\n    send({ODD_DTYPE!r}, bytes(4))\n    return x\n",
            "odd(1)",
            "tensor 0's dtype 'float33' is none of",
        ),
    ],
    ids=["bytes-in-a-cell", "a-cell-reported-as-a-number", "a-tensor-of-no-dtype-from-a-call"],
)
def test_an_answer_the_grader_cannot_read_is_the_learners_failure_with_its_cause(cell, grade_cell, cause):
    """Bytes that are no answer, an answer that is not the cell's report, a tensor of no dtype
    answering a grade cell's call: the judge raises nothing of its own, the grade cell fails and
    its message says what the grader could not read."""
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(SEND_FRAMES + cell), _graded_cell(grade_cell, "graded")]
    )
    (graded,) = run_notebook(nb).checks
    assert not graded.passed and "sent the grader an answer it cannot read" in graded.message, graded.message
    assert cause in graded.message, graded.message


# -- the judge's checks of each answer, on answers broken one field at a time ------------------

# 150 examples in under a second: each is a dict checked in this process, no learner's process.
PROPERTY = settings(max_examples=150, deadline=None, database=None)
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=False),
    st.text(max_size=4),
    st.lists(st.integers(-1, 3) | st.text(max_size=2) | st.lists(st.integers(), max_size=2), max_size=3),
    st.lists(st.integers(-1, 3), max_size=3).map(tuple),
    st.dictionaries(st.text(max_size=3), st.integers(-1, 3) | st.text(max_size=2), max_size=2),
)


class Sized:
    """What ``len()`` makes of a length a proxy's ``__len__`` returns."""

    def __init__(self, length):
        self.length = length

    def __len__(self):
        return self.length


# Each answer the learner's process sends a request with (learner.Server), valid, and what the
# judge then does with it.
VALID: dict[str, tuple[Any, Callable[[Any], None], Callable[[Any], object]]] = {
    "cell": ({"error": None, "where": ""}, proxy._cell_report, lambda ran: (ran["error"], ran.get("where"))),
    "call": (
        {"kind": "ok", "value": torch.zeros(2), "error": "", "where": "", "changed": [], "shortcut": ""},
        proxy._outcome,
        lambda answer: Outcome(**answer),
    ),
    "load": (
        {"error": None, "written": [(1, (2,), (1,), "float32")]},
        proxy._load_report,
        lambda answer: wire.SentTensors().forget(answer["written"]),
    ),
    "shapes": ({"dense.weight": (3, 2)}, proxy._state_shapes, lambda shapes: {k: tuple(v) for k, v in shapes.items()}),
    "digest": ({"dense.weight": "tensor (3, 2)"}, proxy._state_digest, dict),
    "len": (3, proxy._length, lambda n: len(Sized(n))),
    "list": ([1, "a"], proxy._items, iter),
}


@st.composite
def broken_answers(draw) -> tuple[str, object]:
    """A request's name and its valid answer with one field replaced, removed or renamed, or an
    item of one of its lists replaced."""
    request = draw(st.sampled_from(sorted(VALID)))
    how = draw(st.sampled_from(["replace", "remove", "rename", "item", "whole"]))
    if how == "whole" or not isinstance(VALID[request][0], dict):
        return request, draw(JUNK | st.integers())
    answer = dict(VALID[request][0])
    name = draw(st.sampled_from(sorted(answer)))
    if how == "remove":
        del answer[name]
    elif how == "rename":
        answer[draw(st.text(max_size=3))] = answer.pop(name)
    elif how == "item" and isinstance(answer[name], list) and answer[name]:
        answer[name] = [draw(JUNK)]
    else:
        answer[name] = draw(JUNK)
    return request, answer


@PROPERTY
@given(broken_answers())
def test_a_broken_answer_to_a_request_is_refused_or_usable(broken):
    request, answer = broken
    _, check_answer, use = VALID[request]
    try:
        check_answer(answer)
    except wire.MalformedAnswer:
        return
    use(answer)  # what the judge does with an answer it accepted: it raises nothing


def test_the_valid_answers_above_pass_their_checks_and_a_calls_report_has_every_field_of_an_outcome():
    for answer, check_answer, use in VALID.values():
        check_answer(answer)
        use(answer)
    assert set(proxy._OUTCOME) == {f.name for f in dataclasses.fields(Outcome)}


@PROPERTY
@given(st.sampled_from(dir(builtins)) | st.text(max_size=12), st.text(max_size=12))
def test_a_raise_reply_becomes_an_exception_whatever_it_names(name, text):
    error = proxy._learner_error(name, text)
    assert isinstance(error, Exception) and error.args[0].endswith(text)
