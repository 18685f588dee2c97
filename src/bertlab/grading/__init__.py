"""The local autograder: run notebooks like ``nbgrader autograde``, isolated and read-only."""

from bertlab.grading.notebooks import GradingError
from bertlab.grading.runner import Report, TaskResult, grade

__all__ = ["GradingError", "Report", "TaskResult", "grade"]
