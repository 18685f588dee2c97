"""Checks that compare a learner's code with the pretrained model, task by task.

In a notebook's grade cell:

```python
from bertlab.checks import check
check("3.2", BertSelfAttention, upto="values")
```

``check`` prints a one-line success or raises ``CheckFailed`` whose message says what differs,
where, and (when recognised) which known mistake produces exactly that output.
"""

from __future__ import annotations

from bertlab.checks import (
    attention_output,
    bert_model,
    embeddings,
    feed_forward,
    numpy_bert,
    self_attention,
    why_measured,
)
from bertlab.checks.framework import CheckFailed, Task
from bertlab.diagnose import common  # noqa: F401  (mistakes shared by every task)

# One module per assignment, named by its exercise's slug; each exposes TASKS, a list of Task instances.
TASK_MODULES = [
    self_attention,
    numpy_bert,
    attention_output,
    feed_forward,
    embeddings,
    bert_model,
    why_measured,
]
TASKS: dict[str, Task] = {t.id: t for module in TASK_MODULES for t in module.TASKS}

__all__ = ["TASKS", "CheckFailed", "check"]


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
    if task not in TASKS:
        raise KeyError(f"no task {task!r}; tasks are {', '.join(TASKS)}")
    try:
        print(TASKS[task].run(obj, upto=upto, only=only, seed=seed))
    except CheckFailed as err:
        raise CheckFailed(str(err), err.mistake) from None  # the message is the feedback; hide our frames
