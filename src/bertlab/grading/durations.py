"""How long each task took to grade last time: the order in which the next ``bertlab grade`` starts them.

Two judges share the notebooks; one long notebook started last keeps one judge busy while the
other idles. The grade-cell count is a poor guide to a notebook's cost (01 has the most grade
cells and takes a third of 06's time), so each run's seconds per task are kept for the next run
in the user's cache folder (``$BERTLAB_CACHE_DIR``, else ``$XDG_CACHE_HOME/bertlab``, else
``~/.cache/bertlab``). Only the order depends on them, never a verdict: a missing, unreadable or
edited file only means the grade-cell count decides.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

FILE_NAME = "grade-seconds.json"
# For a task never graded here: about what one grade cell of the course's notebooks costs.
SECONDS_PER_GRADE_CELL = 0.5


def cache_dir() -> Path:
    """The user's folder for bertlab's records (this one, ``bertlab.hint_steps``'s)."""
    if os.environ.get("BERTLAB_CACHE_DIR"):
        return Path(os.environ["BERTLAB_CACHE_DIR"])
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "bertlab"


def path() -> Path:
    """The record of this course (``notebooks.course_key``): another clone's times are its own."""
    from bertlab.grading.notebooks import course_key

    return cache_dir() / f"{course_key()}-{FILE_NAME}"


def load() -> dict[str, float]:
    """Task name -> seconds of its last grading ({} when there is no usable record)."""
    try:
        data = json.loads(path().read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: float(v) for k, v in data.items() if isinstance(k, str) and isinstance(v, (int, float)) and v >= 0}


def save(seconds: dict[str, float]) -> None:
    """Record ``seconds`` per task over the earlier record; a folder that cannot be written is skipped."""
    target = path()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{FILE_NAME}.", dir=target.parent)
        with os.fdopen(fd, "w") as f:
            json.dump({**load(), **seconds}, f, indent=1, sort_keys=True)
        os.replace(tmp, target)
    except OSError:
        pass


def estimate(task: str, last: dict[str, float], count_grade_cells: Callable[[], int]) -> float:
    """Seconds ``task`` is expected to take: its last grading's, else from its grade cells
    (counted only then: that reads its notebooks)."""
    return last[task] if task in last else SECONDS_PER_GRADE_CELL * count_grade_cells()
