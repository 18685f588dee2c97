"""What grading a notebook produces, and its default limits: the types every side of grading
shares (the judge that makes a verdict, the runner that collects them, the report)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from bertlab.settings import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT

__all__ = ["DEFAULT_MEMORY_MB", "DEFAULT_TIMEOUT", "CheckResult", "NotebookResult", "grade_cell_meta"]


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
