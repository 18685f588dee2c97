"""A grade cell's first line names every check it runs that no earlier cell of its task ran.

``check(task, obj, upto=stage)`` runs a task's checks in order up to ``stage`` (all of them when
``upto`` is left out), so the last grade cell of a task also runs every check added to the task
since its label was written. The labels are what the learner and the instructor read: Task
3.2's last cell once said "dropout and gradients" while it ran calls, config and arguments too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bertlab.checks import TASKS
from tests.conftest import ROOT

CHECK = re.compile(r'check\("(?P<task>[\d.]+)",\s*\w+(?:,\s*(?P<kind>upto|only)="(?P<stage>\w+)")?')
# How a label may name a stage when not by its own name.
WORDS = {
    "edge_cases": ("edge cases",),
    "random_init": ("random init",),
    "batches": ("random batch",),
    "sentences": ("sentence embeddings",),
    "buffers": ("buffer",),
}


def solutions() -> list[Path]:
    return sorted(ROOT.glob("solutions/[0-9][0-9]-*/[0-9][0-9]-*.ipynb"))


def grade_cells(path: Path) -> list[tuple[str, str]]:
    """(first line, source) of each grade cell that calls ``check``, in notebook order."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    found = []
    for cell in cells:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "code" and cell["metadata"].get("nbgrader", {}).get("grade") and "check(" in source:
            found.append((source.splitlines()[0], source))
    return found


def unnamed_stages(path: Path) -> list[str]:
    """Each grade cell's stages, run there for the first time in its task, that its label leaves out."""
    done: dict[str, int] = {}
    problems = []
    for label, source in grade_cells(path):
        call = CHECK.search(source)
        assert call, f"{path.name}: no check(...) call read in {label!r}"
        stages = TASKS[call["task"]].stages
        if call["kind"] == "only":
            new = [call["stage"]]
        else:
            end = stages.index(call["stage"]) + 1 if call["stage"] else len(stages)
            new = list(stages[done.get(call["task"], 0) : end])
            done[call["task"]] = end
        said = label.lower()
        missing = [s for s in new if not any(w in said for w in (s.replace("_", " "), *WORDS.get(s, ())))]
        if missing:
            problems.append(f"{path.parent.name}: {label!r} runs {', '.join(missing)} without naming it")
    return problems


def test_labels_are_read_from_every_solution_notebook():
    assert len(solutions()) == 7 and all(grade_cells(p) for p in solutions())


@pytest.mark.parametrize("path", solutions(), ids=lambda p: p.parent.name)
def test_every_grade_cell_names_the_checks_it_runs(path: Path):
    assert unnamed_stages(path) == []


def test_a_stale_label_is_caught(tmp_path):
    # Task 3.2's last cell as it was: it runs calls, config and arguments without naming them
    notebook = {
        "cells": [
            {
                "cell_type": "code",
                "metadata": {"nbgrader": {"grade": True}},
                "source": ["# Task 3.2, dropout and gradients (1 point)\n", 'check("3.2", BertSelfAttention)\n'],
            }
        ]
    }
    path = tmp_path / "03" / "03.ipynb"
    path.parent.mkdir()
    path.write_text(json.dumps(notebook))
    (problem,) = unnamed_stages(path)
    assert "names, shapes, values, masks, calls, config, arguments" in problem
