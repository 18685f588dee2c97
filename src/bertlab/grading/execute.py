"""Execute a notebook the way ``nbgrader autograde`` scores it.

Every code cell runs in order in one fresh IPython shell; a grade cell earns its points when it
raises nothing, else 0 with the error's message. Cells after a failure still run, so one broken
task never hides the others. This runs inside a worker process (see ``worker.py``); the parent
enforces the timeout.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import asdict, dataclass, field


@dataclass
class CheckResult:
    """One grade cell's outcome."""

    name: str
    passed: bool
    points: float
    max_points: float
    message: str
    mistake: str | None = None


@dataclass
class NotebookResult:
    checks: list[CheckResult] = field(default_factory=list)
    error: str | None = None  # set when the notebook as a whole could not be graded

    def to_dict(self) -> dict:
        return asdict(self)


def grade_cell_meta(cell) -> dict | None:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if meta.get("grade") and cell.get("cell_type") == "code" else None


def _message(err: BaseException, first_error: str | None) -> str:
    text = str(err).strip() or type(err).__name__
    if isinstance(err, AssertionError) and type(err).__name__ == "CheckFailed":
        return text
    text = f"{type(err).__name__}: {text}"
    if isinstance(err, NameError) and first_error:
        text += f" (an earlier cell failed: {first_error})"
    return text


def run_notebook(nb) -> NotebookResult:
    """Run every code cell of ``nb`` (an nbformat notebook) and score its grade cells."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False  # grading must not write to the learner's IPython history
    shell = InteractiveShell(config=config)
    result = NotebookResult()
    first_error = None
    try:
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            output = io.StringIO()
            with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
                run = shell.run_cell(cell.source, store_history=False)
            err = run.error_before_exec or run.error_in_exec
            meta = grade_cell_meta(cell)
            if meta is None:
                if err is not None and first_error is None:
                    first_error = f"cell {index + 1}, {type(err).__name__}: {err}".strip()
                continue
            points = float(meta.get("points", 0))
            lines = [line for line in output.getvalue().splitlines() if line.strip()]
            result.checks.append(
                CheckResult(
                    name=meta.get("grade_id", f"cell-{index + 1}"),
                    passed=err is None,
                    points=points if err is None else 0.0,
                    max_points=points,
                    message=_message(err, first_error) if err is not None else (lines[-1] if lines else ""),
                    mistake=getattr(err, "mistake", None),
                )
            )
    finally:
        shell.cleanup()
    return result
