"""Score a notebook the way ``nbgrader autograde`` does: the entry point.

Every code cell runs in order; a grade cell earns its points when it raises nothing, else 0 with
the error's message. Cells after a failure still run, so one broken task never hides the others.
How the cells run (the learner's in their own process, the grade cells judged outside it) is in
``judge.py``; what the grading produces is in ``results.py``.
"""

from __future__ import annotations

from bertlab.grading import platforms
from bertlab.grading.judge import judge_notebook
from bertlab.grading.results import NotebookResult


def run_notebook(nb, **options) -> NotebookResult:
    """Grade ``nb`` (an nbformat notebook): its cells in a learner process, the verdict in this one.

    Options are ``judge.judge_notebook``'s (timeout, memory_mb, env, cwd).
    """
    try:
        return judge_notebook(nb, **options)
    finally:
        platforms.current().release_memory()  # after the judge's frame is gone: its copies of the model are free
