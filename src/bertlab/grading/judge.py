"""Grade a notebook with the verdict made outside the learner's process.

The learner's cells run, in order, in their own process (``learner.py``). A grade cell's source
(the instructor's, restored from the source notebook) runs *here*, in the judge, with ``check``
bound to the real checks and every other name looked up in the learner's process as a
``Remote``. The checks choose the inputs, the learner's code computes on them over there, and
the outputs are compared here with the reference. A grade cell earns its points when it raises
nothing, as under ``nbgrader autograde``; cells after a failure still run, up to the last grade
cell.
"""

from __future__ import annotations

import builtins
import contextlib
import io

from bertlab.grading import tamper
from bertlab.grading.proxy import Learner, LearnerGone
from bertlab.grading.results import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT, CheckResult, NotebookResult, grade_cell_meta

# Names a grade cell resolves in the judge, never in the learner's namespace.
TRUSTED_NAMES = ("check",)


class _LearnerNames(dict):
    """A grade cell's local names: found in the learner's process unless the judge owns them."""

    def __init__(self, learner: Learner):
        super().__init__()
        self.learner = learner

    def __getitem__(self, name: str):
        if name in TRUSTED_NAMES or dict.__contains__(self, name):
            return dict.__getitem__(self, name)
        return self.learner.lookup(name)  # KeyError when the learner never defined it


def _run_grade_cell(source: str, learner: Learner, name: str, ran: list[str]) -> None:
    """Run a grade cell's code, the learner's names proxied; ``ran`` gets the id of each task it
    checks, as it starts (a failing check's task too)."""
    from bertlab.checks import check

    def checking(*args, **kwargs) -> None:
        task = str(kwargs.get("task", args[0] if args else ""))
        if task not in ran:  # a hidden test checks the same task again: one task, listed once
            ran.append(task)
        check(*args, **kwargs)

    code = compile(source, f"<grade cell {name}>", "exec")
    exec(code, {"check": checking, "__builtins__": builtins}, _LearnerNames(learner))


def _message(err: BaseException, first_error: str | None) -> str:
    text = str(err).strip() or type(err).__name__
    if type(err).__name__ in ("CheckFailed", "LearnerGone"):
        return text
    text = f"{type(err).__name__}: {text}"
    if isinstance(err, NameError) and first_error:
        text += f" (an earlier cell failed: {first_error})"
    return text


def _heatmap(err: BaseException, result: NotebookResult) -> str | None:
    """The failure's |got - expected| picture, drawn here from the tensors the check compared.

    Drawn for the notebook's first failure only: the Progress page shows that one
    (``progress.entry``), and drawing one took a seventh of a wrong notebook's judging."""
    if any(not c.passed for c in result.checks):
        return None
    try:
        from bertlab.checks import heatmap

        return heatmap.encoded(err)
    except Exception:  # noqa: BLE001  (the picture is an extra: never let it cost the verdict)
        return None


def judge_notebook(
    nb,
    timeout: float = DEFAULT_TIMEOUT,
    memory_mb: float = DEFAULT_MEMORY_MB,
    env: dict | None = None,
    cwd: str | None = None,
) -> NotebookResult:
    """Run every code cell of ``nb`` in a learner process and score its grade cells here."""
    result = NotebookResult()
    tampered = tamper.scan(nb)
    learner = Learner(timeout, memory_mb, env=env, cwd=cwd)
    first_error = None
    gone_in = None  # the cell that was running when the learner's process was stopped (as named)
    # Cells after the last grade cell cannot change a verdict: they are not run (07's closing
    # figure alone took 1.1 s of its 7).
    graded_through = max((i for i, cell in enumerate(nb.cells) if grade_cell_meta(cell)), default=-1)
    try:
        for index, cell in enumerate(nb.cells[: graded_through + 1]):
            if cell.cell_type != "code":
                continue
            meta = grade_cell_meta(cell)
            if meta is None:
                if learner.gone is None:
                    first_error = _run_learner_cell(learner, cell, first_error)
                    gone_in = cell_named(cell) if learner.gone is not None else None
                continue
            points = float(meta.get("points", 0))
            grade_id = meta.get("grade_id", f"cell-{index + 1}")
            if tampered:
                result.checks.append(CheckResult(grade_id, False, 0.0, points, tampered, "tampering"))
                continue
            output = io.StringIO()
            checked: list[str] = []
            try:
                if learner.gone is not None:
                    raise learner.gone
                with contextlib.redirect_stdout(output):
                    _run_grade_cell(cell.source, learner, grade_id, checked)
            except LearnerGone as err:
                result.stopped = err.status
                gone_in = gone_in or cell_named(cell)
                result.checks.append(
                    CheckResult(grade_id, False, 0.0, points, f"{err} ({gone_in} was running)", cause=err.cause)
                )
            except Exception as err:  # noqa: BLE001  (a failed check, or the learner's name missing)
                from bertlab import diagnose  # loaded with the checks, in the judge only

                mistake = getattr(err, "mistake", None)
                known = diagnose.REGISTRY.get(mistake) if isinstance(mistake, str) else None
                result.checks.append(
                    CheckResult(
                        grade_id,
                        False,
                        0.0,
                        points,
                        _message(err, first_error),
                        mistake,
                        _heatmap(err, result),
                        lesson=known.lesson if known else None,
                        section=known.section if known else None,
                        tasks=checked,
                        stage=getattr(err, "stage", None),
                        # a stub the check called, or one a check's own code called through the proxy
                        stub=getattr(err, "cause", None) == "not_implemented" or isinstance(err, NotImplementedError),
                    )
                )
            else:
                lines = [line for line in output.getvalue().splitlines() if line.strip()]
                last = lines[-1] if lines else ""
                result.checks.append(CheckResult(grade_id, True, points, points, last, tasks=checked))
        if learner.gone is not None and result.stopped is None:
            result.stopped = learner.gone.status
    finally:
        learner.kill()
    return result


def cell_named(cell) -> str:
    """A cell as the learner finds it in their notebook: by its first line of code (a feedback
    page numbers no cell, and a count of cells would include the text ones)."""
    first = next((line.strip() for line in cell.source.splitlines() if line.strip()), "")
    shown = first if len(first) <= 60 else first[:57] + "..."
    return f"the cell that starts `{shown}`" if shown else "an empty cell"


def _run_learner_cell(learner: Learner, cell, first_error: str | None) -> str | None:
    try:
        ran = learner.run_cell(cell.source)
    except LearnerGone:
        return first_error
    if ran["error"] and first_error is None:
        where = f" ({ran['where']})" if ran.get("where") else ""
        return f"{cell_named(cell)}: {ran['error']}{where}"
    return first_error
