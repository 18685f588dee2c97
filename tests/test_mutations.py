"""Each known mistake, injected into a copy of the right solution, is named by the grader.

The right solutions themselves, graded whole, pass every check and name no mistake:
``test_grading.test_solutions_score_full_marks`` proves it for every notebook here.
"""

from __future__ import annotations

import re

import nbformat
import pytest

from bertlab import diagnose
from bertlab.checks import TASKS  # noqa: F401  (registers every task's mistakes)
from bertlab.grading.execute import run_notebook
from tests.conftest import solution_notebook
from tests.mutations import all_mutations

pytestmark = pytest.mark.slow  # each case grades a mutated solution notebook end to end

MUTATIONS = all_mutations()


def mutate(nb, old: str, new: str):
    cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    hits = sum(c.source.count(old) for c in cells)
    assert hits == 1, f"{old!r} occurs {hits} times in the solution cells (must be exactly once)"
    for cell in cells:
        cell.source = cell.source.replace(old, new)
    return nb


CHECKED_TASK = re.compile(r'^check\("([\d.]+)"', re.M)


def only_grade_cells_of(nb, tasks):
    """``nb`` without the grade cells of other tasks than ``tasks``, and without the cells after
    the last one kept: the mistake's own tasks name it, and a later cell cannot change an earlier
    verdict. Grading the rest of the notebook again for every mutation (BertModel's checks for a
    mistake in BertLayer, the measurements' plots) is what made this test take minutes."""

    def kept(cell):
        if not cell.metadata.get("nbgrader", {}).get("grade"):
            return True
        checked = set(CHECKED_TASK.findall(cell.source))
        assert checked, f"a grade cell that checks no task: {cell.source[:80]!r}"
        return bool(checked & set(tasks))

    cells = [c for c in nb.cells if kept(c)]
    last = max((i for i, c in enumerate(cells) if c.metadata.get("nbgrader", {}).get("grade")), default=-1)
    nb.cells = cells[: last + 1]
    return nb


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[f"{m.notebook}:{m.mistake}" for m in MUTATIONS])
def test_mutation_is_named(mutation):
    assert mutation.mistake in diagnose.REGISTRY, f"unknown mistake id {mutation.mistake}"
    nb = mutate(nbformat.read(solution_notebook(mutation.notebook), as_version=4), mutation.old, mutation.new)
    tasks = diagnose.REGISTRY[mutation.mistake].tasks
    result = run_notebook(only_grade_cells_of(nb, tasks))
    assert {c.name for c in result.checks}, f"no grade cell of tasks {tasks} in {mutation.notebook}"
    failed = [c for c in result.checks if not c.passed]
    assert failed, "the mutated solution still gets full marks"
    named = {c.mistake for c in failed if c.mistake}
    assert named == {mutation.mistake}, "\n\n".join(c.message for c in failed)
    assert f"known mistake `{mutation.mistake}`" in next(c.message for c in failed if c.mistake)


def test_every_registered_mistake_is_injected():
    injected = {m.mistake for m in MUTATIONS}
    assert set(diagnose.REGISTRY) <= injected, f"never injected: {sorted(set(diagnose.REGISTRY) - injected)}"
