"""What grading a notebook produces, and its default limits: the types every side of grading
shares (the judge that makes a verdict, the runner that collects them, the report)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from bertlab.settings import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT

__all__ = [
    "DEFAULT_MEMORY_MB",
    "DEFAULT_TIMEOUT",
    "CheckResult",
    "NotebookResult",
    "first_of_each_task",
    "grade_cell_meta",
    "task_of",
]


@dataclass
class CheckResult:
    """One grade cell's outcome."""

    name: str
    passed: bool
    points: float
    max_points: float
    message: str
    mistake: str | None = None
    # base64 PNG of |got - expected| (checks.heatmap), on a notebook's first failure when its values differ
    heatmap: str | None = None
    cause: str | None = None  # the limit that stopped the notebook: "timeout" or "memory" (else None)
    lesson: str | None = None  # where the known mistake is explained: a lesson's slug ...
    section: str | None = None  # ... and its section's title
    tasks: list[str] = field(default_factory=list)  # the tasks whose checks the grade cell ran (up to a failure)
    stage: str | None = None  # the stage that failed (bertlab.checks.stages), when a check failed
    # the learner's code raised NotImplementedError: a stub not written yet, no attempt (bertlab.hints)
    stub: bool = False


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


# The course's grade cells are named test-<n>-<m>-<what>, for Task n.m.
_GRADE_ID = re.compile(r"test-(\d+)-(\d+)-")


def task_of(check) -> str | None:
    """The task ("3.2") a verdict is about: the tasks its grade cell checked, else its grade cell's id."""
    if check.tasks:
        return str(check.tasks[0])
    match = _GRADE_ID.match(check.name)
    return f"{match.group(1)}.{match.group(2)}" if match else None


def first_of_each_task(failed: list) -> list:
    """The first of ``failed`` (verdicts in notebook order) for each task they are about: what the
    table prints in full, since a notebook holds several tasks and each one's failure is news."""
    seen: set[str] = set()
    first = []
    for check in failed:
        task = task_of(check) or check.name
        if task not in seen:
            seen.add(task)
            first.append(check)
    return first
