"""The learner's progress for the course site: ``progress.json`` (and heatmaps) written by ``bertlab grade``.

The site's Progress page (``docs/progress.md``, ``docs/assets/progress.js``) reads
``<site>/progress.json`` in the browser, so a refresh shows the latest grades without a rebuild.
Each task graded replaces its own entry; tasks not graded this time keep theirs. A failure whose
values differ also leaves ``<site>/heatmaps/<task>.png``, the heatmap the judge drew.

Every file is written to a temporary name in the same directory and renamed, so the page never
reads half a file; nothing but the progress directory is written (the learner's notebooks are
only read, by the grader).
"""

from __future__ import annotations

import base64
import json
import os
import re
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from bertlab.headings import heading_id

FILE = "progress.json"
IMAGES = "heatmaps"  # <progress dir>/heatmaps/<task>.png (progress/ is the page itself)
VERSION = 1


def lesson_url(lesson: str, section: str) -> str:
    """The site URL (relative to the site root) of a lesson's section: lesson
    ``03-multi-head-attention``, section "Scaled scores" gives
    ``lessons/03-multi-head-attention/#scaled-scores``."""
    return f"lessons/{lesson}/#{heading_id(section)}"


def _file_name(task: str) -> str:
    return re.sub(r"[^\w.-]", "_", task) + ".png"


def _write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide it from a server running as another user
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("version") == VERSION else {}


def entry(task, graded_at: str) -> tuple[dict, bytes | None]:
    """(the JSON entry of a ``TaskResult``, the PNG of its first failure's heatmap or None)."""
    failed = [c for c in task.checks if not c.passed]
    first = failed[0] if failed else None
    image = base64.b64decode(first.heatmap) if first is not None and first.heatmap else None
    message = task.first_message
    # the judge wrote the known mistake's lesson and section into the verdict (``CheckResult``)
    lesson = (
        (lesson_url(first.lesson, first.section), first.section) if first and first.lesson and first.section else None
    )
    return {
        "task": task.task,
        "exercise": f"exercises/{task.task}/{task.task}/",
        "score": task.score,
        "max_score": task.max_score,
        "status": task.status,
        "message": message,
        "mistake": first.mistake if first is not None else None,
        "lesson": lesson[0] if lesson else None,
        "section": lesson[1] if lesson else None,
        "heatmap": f"{IMAGES}/{_file_name(task.task)}" if image is not None else None,
        "graded_at": graded_at,
    }, image


def write(report, out: Path, now: datetime | None = None) -> Path:
    """Merge ``report``'s tasks into ``out/progress.json`` and write their heatmaps; return its path.

    Args:
        report: a ``grading.Report``.
        out: the built site's directory (or any directory the Progress page is served from).
        now: the grading time (default: now, UTC).
    """
    graded_at = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    target = out / FILE
    tasks = {t["task"]: t for t in _read(target).get("tasks", []) if isinstance(t, dict) and "task" in t}
    stale = []
    for task in report.tasks:
        data, image = entry(task, graded_at)
        image_path = out / IMAGES / _file_name(task.task)
        if image is not None:
            _write_atomic(image_path, image)  # before the JSON that links it
        elif image_path.exists():
            stale.append(image_path)
        tasks[task.task] = data
    ordered = [tasks[name] for name in sorted(tasks)]
    summary = {
        "version": VERSION,
        "graded_at": graded_at,
        "score": sum(t["score"] for t in ordered),
        "max_score": sum(t["max_score"] for t in ordered),
        "tasks": ordered,
    }
    _write_atomic(target, (json.dumps(summary, indent=2) + "\n").encode())
    for path in stale:  # after the JSON stopped linking them
        path.unlink(missing_ok=True)
    return target
