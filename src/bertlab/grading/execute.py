"""Score a notebook the way ``nbgrader autograde`` does: the results and the entry point.

Every code cell runs in order; a grade cell earns its points when it raises nothing, else 0 with
the error's message. Cells after a failure still run, so one broken task never hides the others.
How the cells run (the learner's in their own process, the grade cells judged outside it) is in
``judge.py``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

DEFAULT_TIMEOUT = 300.0  # seconds per notebook
DEFAULT_MEMORY_MB = 4096.0  # for the learner's process


@dataclass
class CheckResult:
    """One grade cell's outcome."""

    name: str
    passed: bool
    points: float
    max_points: float
    message: str
    mistake: str | None = None
    heatmap: str | None = None  # base64 PNG of |got - expected| when values differ (checks.heatmap)


@dataclass
class NotebookResult:
    checks: list[CheckResult] = field(default_factory=list)
    error: str | None = None  # set when the notebook as a whole could not be graded
    stopped: str | None = None  # "timeout" or "error" when the learner's process was stopped

    def to_dict(self) -> dict:
        return asdict(self)


def grade_cell_meta(cell) -> dict | None:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if meta.get("grade") and cell.get("cell_type") == "code" else None


def run_notebook(nb, **options) -> NotebookResult:
    """Grade ``nb`` (an nbformat notebook): its cells in a learner process, the verdict in this one.

    Options are ``judge.judge_notebook``'s (timeout, memory_mb, env, cwd).
    """
    from bertlab.grading import platforms
    from bertlab.grading.judge import judge_notebook

    try:
        return judge_notebook(nb, **options)
    finally:
        platforms.current().release_memory()  # after the judge's frame is gone: its copies of the model are free
