"""Checks that compare a learner's code with the pretrained model, task by task.

In a notebook's grade cell:

```python
from bertlab.checks import check
check("3.2", BertSelfAttention, upto="values")
```

``check`` prints a one-line success or raises ``CheckFailed`` whose message says what differs,
where, and (when recognised) which known mistake produces exactly that output.

The task modules are imported on first use, not with this package: a learner's process being
graded imports ``bertlab.checks`` (its notebook's first cell does, and so does the harness) and
needs none of them. The expected side of every comparison is the course's own BERT
(``bertlab.bert``, transformers' bit for bit: ``tests/test_judge_reference.py``); nothing here
imports transformers (``tests/test_judge_imports.py``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bertlab.checks.framework import CheckFailed, Task

# One module per assignment, named by its exercise's slug; each exposes TASKS, a list of Task instances.
TASK_MODULE_NAMES = (
    "self_attention",
    "numpy_bert",
    "attention_output",
    "feed_forward",
    "embeddings",
    "bert_model",
    "why_measured",
)

__all__ = ["TASKS", "CheckFailed", "check"]


def __getattr__(name: str):
    if name == "TASKS":
        from bertlab.diagnose import common  # noqa: F401  (mistakes shared by every task)

        modules = [importlib.import_module(f"bertlab.checks.{module}") for module in TASK_MODULE_NAMES]
        tasks: dict[str, Task] = {t.id: t for module in modules for t in module.TASKS}
        globals()["TASKS"] = tasks  # built once: later reads find it here
        return tasks
    if name in ("CheckFailed", "Task"):
        from bertlab.checks import framework

        return getattr(framework, name)
    raise AttributeError(f"module 'bertlab.checks' has no attribute {name!r}")


def check(task: str, obj, upto: str | None = None, only: str | None = None, seed: int = 0) -> None:
    """Run the checks of ``task`` on ``obj`` (the learner's class or function).

    Args:
        task: the task id, e.g. ``"3.2"``.
        obj: what the learner wrote, e.g. their ``BertSelfAttention`` class.
        upto: run the checks in order up to and including this one (default: all).
        only: run just this check.
        seed: seed of the random batches.

    Raises:
        CheckFailed: with the feedback message, at the first failing check.
    """
    from bertlab import reference
    from bertlab.checks.framework import CheckFailed

    if reference.course_modules_only():
        # A notebook being graded: its grade cells run in the grader's process, not here.
        print(f"check({task!r}) runs in the grader's own process while your notebook is graded.")
        return
    tasks = __getattr__("TASKS")
    if task not in tasks:
        raise KeyError(f"no task {task!r}; tasks are {', '.join(tasks)}")
    try:
        print(tasks[task].run(obj, upto=upto, only=only, seed=seed))
    except CheckFailed as err:
        raise err.adding() from None  # the message is the feedback; hide our frames
