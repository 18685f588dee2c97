"""Bad submissions graded end to end: each gets the verdict a good grader gives.

The cases live in ``tests/submissions.py``. They are graded in two ``grade()`` runs, each once
per session, because every notebook costs seconds: "main" (everything that ends by itself,
``os._exit`` included) and "limits" (endless loops and runaway memory, with a short timeout and a
small memory limit). Each case is then one test that compares the report with its expectation:
score, maximum, status, the first failure message, the grade cells that must fail, and no
traceback or printout in any message. Other tests check that each run graded every notebook
despite its catastrophic neighbours and left the learner's files byte for byte as they were.
"""

from __future__ import annotations

import re

import pytest

from tests.bad_submission_runs import GROUP, Graded
from tests.submissions import CASES, RUNS, Case, check_cases

# A whole run is graded in the setup of its first test: allow it far more than one test's time.
# The runs are tests/bad_submission_runs.py's session fixtures, shared with the portable path's tests.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600), pytest.mark.xdist_group(GROUP)]

# Cases after which the learner's process cannot go on; the other cases of their run show that the
# rest of the run is still graded.
CATASTROPHES = {
    "05-os-exit-in-cell",
    "05-os-exit-in-forward",
    "05-infinite-loop-in-cell",
    "05-infinite-loop-in-forward",
    "05-runaway-memory",
}
CONTROLS = {"main": "05-right-feed-forward", "limits": "05-right-beside-limits"}
# A message is feedback for a learner: a few lines, never a printout or the grader's own frames.
MAX_MESSAGE_CHARS = 5000
TRACEBACK = "Traceback (most recent call last)"
GRADER_FRAME = re.compile(r'File "[^"]*bertlab[/\\]')


def describe(task) -> str:
    lines = [f"got: {task.status}, {task.score:g}/{task.max_score:g}"]
    lines += [
        f"  {c.name}: {'passed' if c.passed else 'FAILED'} {c.points:g}/{c.max_points:g}: {c.message[:600]}"
        for c in task.checks
    ]
    return "\n".join(lines)


def problems_with(case: Case, task) -> list[str]:
    """Everything in ``task`` (a TaskResult) that differs from what ``case`` expects."""
    problems = []
    if task.status not in case.status:
        problems.append(f"status {task.status!r}, expected {' or '.join(case.status)}")
    if task.max_score != case.max_score:
        problems.append(f"maximum {task.max_score:g}, expected the assignment's {case.max_score:g}")
    if task.score not in case.scores:
        allowed = ", ".join(f"{s:g}" for s in case.scores)
        problems.append(f"score {task.score:g}, expected {allowed} (of {case.max_score:g})")
    first = task.first_message
    if not re.search(case.message, first):
        problems.append(f"first message does not match {case.message!r}: {first[:600]!r}")
    if case.forbid and re.search(case.forbid, first):
        problems.append(f"first message matches {case.forbid!r}, a wrong hint: {first[:600]!r}")
    by_id = {c.name: c for c in task.checks}
    for grade_id in case.must_fail:
        if grade_id not in by_id:
            problems.append(f"grade cell {grade_id} missing from the report")
        elif by_id[grade_id].passed:
            problems.append(f"grade cell {grade_id} passed; it exercises the defect")
    for check in task.checks:
        if TRACEBACK in check.message or GRADER_FRAME.search(check.message):
            problems.append(f"{check.name}: a traceback in the message: {check.message[:600]!r}")
        if len(check.message) > MAX_MESSAGE_CHARS:
            problems.append(f"{check.name}: a message of {len(check.message)} characters")
    return problems


@pytest.mark.parametrize("case", CASES, ids=[c.folder for c in CASES])
def test_verdict(case: Case, request):
    """The case's task gets the expected verdict, and its submitted file is left as it was."""
    run: Graded = request.getfixturevalue(f"{case.run}_run")
    task = run.tasks.get(case.folder)
    assert task is not None, f"{case.folder} is missing from the report, which has {sorted(run.tasks)}"
    print(describe(task))  # the verdict as graded, shown by `pytest -rA` for passing cases too
    problems = problems_with(case, task)
    changed = [p.name for p in run.before if p.parent.name == case.folder and run.after.get(p) != run.before[p]]
    if changed:
        problems.append(f"grading changed the submitted {', '.join(changed)}")
    assert not problems, f"{case.why}\n\n" + "\n".join(problems) + "\n\n" + describe(task)


@pytest.mark.parametrize("run", RUNS)
def test_every_notebook_of_a_run_is_graded_beside_catastrophes(run, request) -> None:
    """A run holding os._exit, endless loops or runaway memory still grades every other notebook:
    all are in the report, none of them stopped, and the right one gets full marks."""
    graded: Graded = request.getfixturevalue(f"{run}_run")
    expected = {c.folder: c for c in CASES if c.run == run}
    assert expected.keys() & CATASTROPHES, f"the {run} run has no catastrophic case to be graded beside"
    assert sorted(graded.tasks) == sorted(expected), "the report does not list exactly the run's notebooks"
    stopped = {
        name: t.status
        for name, t in graded.tasks.items()
        if name not in CATASTROPHES and t.status not in expected[name].status and t.status in ("error", "timeout")
    }
    assert not stopped, f"notebooks stopped beside the catastrophes: {stopped}"
    control = graded.tasks[CONTROLS[run]]
    assert (control.status, control.score) == ("passed", control.max_score) and control.max_score > 0, describe(control)


@pytest.mark.parametrize("run", RUNS)
def test_submitted_files_are_unchanged(run, request) -> None:
    """Grading only reads: every submitted file byte for byte as before, and no file added."""
    graded: Graded = request.getfixturevalue(f"{run}_run")
    assert graded.before, "nothing was submitted"
    added = sorted(str(p) for p in graded.after.keys() - graded.before.keys())
    changed = sorted(str(p) for p in graded.before if graded.after.get(p) != graded.before[p])
    assert not added and not changed, f"added: {added}\nchanged or removed: {changed}"


def test_the_case_list_is_consistent():
    """At least 40 cases, unique folders, expectations that do not contradict each other, and every
    issue class present (so a case cannot be dropped silently)."""
    assert len(CASES) >= 40
    assert check_cases() == []
    names = {c.name for c in CASES}
    for needed in (
        "dropout-on-residual-sum",
        "literal-sizes",
        "subclass-hf-self-output",
        "wrap-hf-self-output",
        "tamper-rebind-check",
        "tamper-patch-check-function",
        "in-place-residual",
        "second-residual-from-layer-input",
        "ffn-fed-layer-input",
        "ffn-twice",
        "log-sum-exp-softmax",
        "crash-on-inputs-embeds-only",
        "gelu-returns-float64",
        "syntax-error",
        "import-error",
        "exception-in-init",
        "infinite-loop-in-cell",
        "infinite-loop-in-forward",
        "runaway-memory",
        "nan-output",
        "inf-output",
        "float64-output",
        "output-on-another-device",
        "tuple-instead-of-tensor",
        "tensor-instead-of-tuple",
        "global-default-dtype",
        "global-grad-mode",
        "global-seed",
        "global-thread-count",
        "megabytes-of-printing",
        "sys-exit-in-cell",
        "os-exit-in-cell",
        "grade-cell-deleted",
        "grade-cell-edited",
        "grade-cells-reordered",
        "locked-setup-cell-edited",
        "empty-notebook",
        "not-json",
        "other-task-notebook",
    ):
        assert needed in names, f"no case {needed}"
    wrong = [c for c in CASES if "passed" not in c.status]
    assert all(max(c.scores) < c.max_score for c in wrong), "a wrong submission allowed full marks"


def test_cases_differ_from_their_starting_point(tmp_path):
    """Every builder changes something: a builder whose edit stopped applying would otherwise test
    a right notebook under a wrong name."""
    from tests.submissions import _raw, exercise, right

    starts = {}
    for c in CASES:
        built = c.build()
        raw = built if isinstance(built, bytes) else _raw(built)
        if c.name in ("right-feed-forward", "right-beside-limits"):
            assert raw == _raw(right(c.assignment))
            continue
        key = c.assignment
        if key not in starts:
            starts[key] = {_raw(right(key)), _raw(exercise(key))}
        assert raw not in starts[key], f"{c.folder} is its starting notebook unchanged"
