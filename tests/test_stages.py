"""The stage registry (``bertlab.checks.stages``) is the one list of checks: the tasks, the grade
cells of the notebooks and the guides all name stages from it, in its order."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from bertlab.checks import TASKS
from bertlab.checks.framework import Task
from bertlab.checks.stages import ORDER, STAGES, stage
from tests.test_contributor_map import task_map

ROOT = Path(__file__).resolve().parents[1]


def test_every_task_runs_registered_stages_in_the_registry_order_and_implements_each():
    order = [s.name for s in ORDER]
    for task in TASKS.values():
        assert task.stages, f"task {task.id} lists no stage"
        positions = [order.index(name) for name in task.stages]
        assert positions == sorted(set(positions)), f"task {task.id}: {task.stages}"
        assert all(callable(getattr(task, STAGES[name].method, None)) for name in task.stages)


def test_every_registered_stage_is_run_by_some_task():
    run = {name for task in TASKS.values() for name in task.stages}
    assert run == set(STAGES)


@pytest.mark.parametrize(
    ("stages", "error", "says"),
    [
        (("values", "shapes"), TypeError, "in the course's order they are shapes, values"),
        (("valuez",), ValueError, "no check stage is called 'valuez'"),
        (("shapes", "conclusions"), TypeError, "no method for: check_conclusions"),
    ],
)
def test_a_task_class_that_names_stages_wrongly_fails_when_defined(stages, error, says):
    def check_shapes(self, obj, ctx):
        pass

    with pytest.raises(error, match=says):
        type("Planted", (Task,), {"stages": stages, "check_shapes": check_shapes})


@pytest.mark.parametrize(("upto", "says"), [("value", "no check stage is called 'value'"), ("batches", "has no check")])
def test_a_grade_cell_naming_a_stage_its_task_lacks_fails_before_anything_runs(upto, says):
    # obj=None would fail in any check: the error must come from the name, before a check runs
    with pytest.raises(ValueError, match=says):
        TASKS["3.2"].run(None, upto=upto)
    with pytest.raises(ValueError, match=says):
        TASKS["3.2"].run(None, only=upto)


def _grade_calls(notebook: Path):
    """Each ``check(task, obj, upto=..., only=...)`` of the notebook's code cells: (task, keyword, stage)."""
    for cell in json.loads(notebook.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!", "###"))]
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "check":
                task = ast.literal_eval(node.args[0])
                for keyword in node.keywords:
                    if keyword.arg in ("upto", "only"):
                        yield task, keyword.arg, ast.literal_eval(keyword.value)
                yield task, None, None


@pytest.mark.parametrize("kind", ["solutions", "exercises"])
def test_every_grade_cell_names_a_stage_of_its_task(kind):
    calls = [c for nb in sorted(ROOT.glob(f"{kind}/[0-9][0-9]-*/*.ipynb")) for c in _grade_calls(nb)]
    assert {task for task, _, _ in calls} == set(TASKS), "a task no grade cell checks, or a cell naming no task"
    wrong = [f"check({task!r}, {kw}={name!r})" for task, kw, name in calls if kw and name not in TASKS[task].stages]
    assert wrong == []
    assert {name for _, kw, name in calls if kw} >= {"values", "shapes"}


def test_the_guides_show_the_registry_not_a_typed_list():
    tasks = [{"id": t.id, "stages": list(t.stages)} for t in TASKS.values()]
    stages = [(s.name, s.question) for s in ORDER]
    table = task_map.stage_table(stages, tasks)
    for s in ORDER:
        ids = [t.id for t in TASKS.values() if s.name in t.stages]
        assert f"| {s.name} | {s.question} |" in table and ", ".join(sorted(ids, key=lambda i: i.split("."))) in table
    assert task_map.stage_order(stages, tasks) == ", ".join(STAGES)
    guide = (ROOT / "docs" / "learner-guide.md").read_text()
    assert task_map.STAGE_TABLE in guide and "| names |" not in guide
    assert task_map.STAGE_ORDER in (ROOT / "docs" / "instructor-guide.md").read_text()


def test_stage_lookup_names_the_known_stages():
    assert stage("dropout").method == "check_dropout"
    with pytest.raises(ValueError, match="the stages are names, shapes"):
        stage("dropouts")


def test_the_contributor_page_says_which_file_holds_each_module_stage():
    """Each row of the page's table names the file where ``ModuleTask``'s checks of those stages are."""
    import inspect
    import re

    from bertlab.checks.module_task import ModuleTask

    page = (ROOT / "docs" / "how-it-is-built.md").read_text()
    rows = re.findall(r"^\| `(src/bertlab/checks/stage_\w+\.py)` \| ([^|]+) \|$", page, re.M)
    assert len(rows) >= 6, rows
    named = {}
    for path, stages in rows:
        named.update((word, path) for word in re.findall(r"\w+", stages) if word in STAGES)
    module_stages = [s for s in STAGES if callable(getattr(ModuleTask, STAGES[s].method, None))]
    assert set(named) == set(module_stages), sorted(named)
    wrong = {
        name: (path, inspect.getsourcefile(getattr(ModuleTask, STAGES[name].method)))
        for name, path in named.items()
        if not str(inspect.getsourcefile(getattr(ModuleTask, STAGES[name].method))).endswith(path)
    }
    assert wrong == {}


def test_a_failed_check_says_which_stage_failed():
    from bertlab.checks import CheckFailed

    def layer_norm(x, weight, bias, eps):
        return x  # runs, right shapes, wrong values

    with pytest.raises(CheckFailed) as failed:
        TASKS["1.2"].run(layer_norm)
    assert failed.value.stage == "values"
    # as a grade cell calls it: check() re-raises the failure with its frames hidden
    from bertlab.checks import check

    with pytest.raises(CheckFailed) as failed:
        check("1.2", layer_norm)
    assert failed.value.stage == "values"
    assert failed.value.adding("a line").stage == "values"


class _Planted(Task):
    """A task whose checks fail as the test asks: ``obj`` maps a stage to (message, blocking)."""

    id, title, lesson = "0.1", "Planted", ""
    stages = ("names", "shapes", "values", "masks")

    def _stage(self, name, obj):
        if name in obj:
            message, blocking = obj[name]
            self.fail(message, "why", blocking=blocking)

    def check_names(self, obj, ctx):
        self._stage("names", obj)

    def check_shapes(self, obj, ctx):
        self._stage("shapes", obj)

    def check_values(self, obj, ctx):
        self._stage("values", obj)

    def check_masks(self, obj, ctx):
        self._stage("masks", obj)


def test_a_form_failure_that_blocks_nothing_costs_only_a_run_that_ends_in_the_form_stages():
    from bertlab.checks import CheckFailed

    task, eps = _Planted(), {"names": ("eps is 1e-05", False)}
    for run in ({"upto": "names"}, {"upto": "shapes"}, {"only": "names"}):
        with pytest.raises(CheckFailed, match="eps is 1e-05") as failed:
            task.run(eps, **run)
        assert failed.value.stage == "names"
    said = "names failed, which the cell that checks names and shapes counts: eps is 1e-05"
    assert task.run(eps, upto="values") == f"[Task 0.1] Planted: shapes, values passed; {said}"
    assert task.run(eps) == f"[Task 0.1] Planted: shapes, values, masks passed; {said}"
    # a later check still fails on its own, and says what failed before it
    noted = r"masks differ\n  \(Before it, the names check failed: eps is 1e-05\)\n  why$"
    with pytest.raises(CheckFailed, match=noted) as failed:
        task.run({**eps, "masks": ("masks differ", True)})
    assert failed.value.stage == "masks"


def test_a_failure_that_blocks_stops_the_run_and_only_form_stages_can_block_nothing():
    from bertlab.checks import CheckFailed

    for obj, failing in (
        ({"names": ("LayerNorm.weight missing", True)}, "names"),
        ({"values": ("values differ", False)}, "values"),  # past the form stages, it stops the run
    ):
        with pytest.raises(CheckFailed) as failed:
            _Planted().run(obj)
        assert failed.value.stage == failing


def test_every_task_whose_names_check_can_block_nothing_has_a_cell_that_counts_it():
    """A names failure that blocks nothing costs only a run that ends in a form stage: the task
    needs such a grade cell, or wrong code would lose no point for it. ``ValueChecks``' own names
    check always blocks (a module that cannot load); the tasks that add to it need the cell."""
    from bertlab.checks.stage_values import ValueChecks
    from bertlab.checks.stages import FORM

    calls = [c for nb in sorted(ROOT.glob("solutions/[0-9][0-9]-*/*.ipynb")) for c in _grade_calls(nb)]
    counted = {task for task, kw, name in calls if kw and name in FORM}
    adding = {
        task.id
        for task in TASKS.values()
        if "names" in task.stages and getattr(type(task), "check_names", None) is not ValueChecks.check_names
    }
    assert {"2.1", "4.1", "5.1"} <= adding
    assert adding <= counted, sorted(adding - counted)
