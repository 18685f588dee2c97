"""The grade table printed by ``bertlab grade``."""

from __future__ import annotations

import shutil

from bertlab.grading.results import first_of_each_task
from bertlab.grading.runner import Report


def render(report: Report, verbose: bool = False) -> str:
    """One row per notebook (its folder, score, status, first message), then the first failure of each
    course task it holds in full (every failure if ``verbose``)."""
    rows = [
        (t.task, f"{t.score:g}/{t.max_score:g}", t.status, t.first_message.splitlines()[0] if t.first_message else "")
        for t in report.tasks
    ]
    rows.append(("total", f"{report.score:g}/{report.max_score:g}", "", ""))
    header = ("notebook", "score", "status", "first message")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    room = max(20, shutil.get_terminal_size((120, 20)).columns - sum(widths) - 6)
    shown = [(row, row[3] if len(row[3]) <= room else row[3][: room - 3] + "...") for row in [header, *rows]]
    # The rule is as wide as the widest line it separates: never wider than the terminal.
    rule = "-" * (sum(widths) + 6 + max(len(message) for _, message in shown))
    lines = []
    for i, (row, message) in enumerate(shown):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + message)
        if i == 0 or i == len(rows) - 1:
            lines.append(rule)
    for task in report.tasks:
        failed = [c for c in task.checks if not c.passed]
        for check in failed if verbose else first_of_each_task(failed):
            lines += ["", f"{task.task} / {check.name} (0/{check.max_points:g} points):", check.message]
    advice = limit_advice({c.cause for t in report.tasks for c in t.checks if not c.passed})
    return "\n".join(lines + [""] * bool(advice) + advice)


def limit_advice(causes: set[str | None]) -> list[str]:
    """How to raise the limits that stopped a notebook, for whoever ran the command.

    Never part of a verdict's message: a learner reads those in nbgrader's feedback, and the
    limits of an instructor's class are not theirs to raise.
    """
    advice = []
    if "timeout" in causes:
        advice.append("A notebook timed out: the limit is --timeout SECONDS (or bertlab.toml's grade.timeout).")
    if "memory" in causes:
        advice.append(
            "A notebook used too much memory: the limit is --memory-limit MB (or bertlab.toml's grade.memory_limit)."
        )
    return advice
