"""``bertlab grade --watch``: grade a notebook again each time it is saved, from a warm worker.

The worker keeps the reference model and its captured activations between grades, so a grade
costs only the notebook's own cells and checks. Every grade still runs the cells in a newly
forked learner process with a new namespace: a learner's cell may change global state (torch's
defaults, monkey-patched modules), and nothing of one run may decide the next one's verdict.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from bertlab.grading import notebooks
from bertlab.grading.pool import JudgePool, Limits, judge_env
from bertlab.grading.runner import Report, grade_task

POLL_SECONDS = 0.05
# Editors save in several writes: grade once the file has kept its state this long.
SETTLE_SECONDS = 0.05


def _stamp(paths: list[Path]) -> tuple:
    stamps: list[tuple[str, int | None, int | None]] = []  # None, None: the file cannot be read
    for path in paths:
        try:
            stat = path.stat()
            stamps.append((path.name, stat.st_mtime_ns, stat.st_size))
        except OSError:
            stamps.append((path.name, None, None))
    return tuple(stamps)


def watch(
    path: Path,
    wanted: list[str],
    limits: Limits,
    show: Callable[[Report, float], None],
    say: Callable[[str], None] = print,
    model: str | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> None:
    """Grade the selected tasks now, then each one again whenever one of its notebooks changes.

    Args:
        show: called with each grade's report and the seconds from the save to the result.
        stop: polled between checks for changes; True ends the watch (Ctrl-C does too).
    """
    tasks = notebooks.select(notebooks.discover(path), wanted)
    pool = JudgePool(judge_env(1, model, long_lived=True))
    pool.warm_up()
    try:
        stamps = {}
        for name in tasks:
            stamps[name] = _stamp(_files(path, name))
            show(Report([grade_task(name, _files(path, name), limits, pool)]), 0.0)
        say(f"watching {', '.join(tasks)} under {path}/: save a notebook to grade it again (Ctrl-C to stop)")
        while not stop():
            time.sleep(POLL_SECONDS)
            for name in tasks:
                now = _stamp(_files(path, name))
                if now == stamps[name]:
                    continue
                saved = max((stamp[1] for stamp in now if stamp[1] is not None), default=time.time_ns()) / 1e9
                time.sleep(SETTLE_SECONDS)
                settled = _stamp(_files(path, name))
                if settled != now:
                    continue  # still being written: the next poll sees it again
                stamps[name] = settled
                show(Report([grade_task(name, _files(path, name), limits, pool)]), time.time() - saved)
    except KeyboardInterrupt:
        pass
    finally:
        pool.close()


def _files(path: Path, name: str) -> list[Path]:
    # Read again every time: a notebook deleted and saved anew is the same task.
    return sorted((path / name).glob("*.ipynb"))
