"""Each known mistake, injected into a copy of the right solution, is named by the grader."""

from __future__ import annotations

import nbformat
import pytest

from bertlab import diagnose
from bertlab.checks import TASKS  # noqa: F401  (registers every task's mistakes)
from bertlab.grading.execute import run_notebook
from tests.conftest import solution_notebook
from tests.mutations import all_mutations

MUTATIONS = all_mutations()


def mutate(nb, old: str, new: str):
    cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    hits = sum(c.source.count(old) for c in cells)
    assert hits == 1, f"{old!r} occurs {hits} times in the solution cells (must be exactly once)"
    for cell in cells:
        cell.source = cell.source.replace(old, new)
    return nb


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[f"{m.notebook}:{m.mistake}" for m in MUTATIONS])
def test_mutation_is_named(mutation):
    assert mutation.mistake in diagnose.REGISTRY, f"unknown mistake id {mutation.mistake}"
    nb = mutate(nbformat.read(solution_notebook(mutation.notebook), as_version=4), mutation.old, mutation.new)
    result = run_notebook(nb)
    failed = [c for c in result.checks if not c.passed]
    assert failed, "the mutated solution still gets full marks"
    named = {c.mistake for c in failed if c.mistake}
    assert named == {mutation.mistake}, "\n\n".join(c.message for c in failed)
    assert f"known mistake `{mutation.mistake}`" in next(c.message for c in failed if c.mistake)


def test_every_registered_mistake_is_injected():
    injected = {m.mistake for m in MUTATIONS}
    assert set(diagnose.REGISTRY) <= injected, f"never injected: {sorted(set(diagnose.REGISTRY) - injected)}"


@pytest.mark.parametrize("notebook", sorted({m.notebook for m in MUTATIONS}))
def test_right_solution_names_no_mistake(notebook):
    result = run_notebook(nbformat.read(solution_notebook(notebook), as_version=4))
    assert result.checks and all(c.passed for c in result.checks), [c.message for c in result.checks]
