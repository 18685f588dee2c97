"""How far up each hint ladder the learner is (``bertlab.hints``), kept between grades.

One file per graded folder, in the user's cache folder (``grading.durations.cache_dir``), named by
the folder's absolute path: every grading command finds it, before the site is built (the site's
``progress.json`` is written only into a built ``site/``, and a site build empties it), with
``--path`` or without, from any working directory, and nothing is written beside the notebooks.
Grading ``solutions/`` climbs ladders of its own, never the learner's.

Counts kept by older versions beside the site's ``progress.json`` (``<site>/hints.json``) are read
while the cache holds none, and removed once they are kept here.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from bertlab.grading.durations import cache_dir

FILE_NAME = "hint-steps.json"
BESIDE_PROGRESS = "hints.json"  # where older versions kept them, in the progress directory
VERSION = 1


def path(graded: Path) -> Path:
    """The file of the notebooks under ``graded`` (``bertlab grade --path``)."""
    key = hashlib.sha256(str(graded.resolve()).encode()).hexdigest()[:12]
    return cache_dir() / f"{key}-{FILE_NAME}"


def read(file: Path) -> dict[str, int]:
    """Key (``bertlab.hints.Shown.key``) -> the step shown last; {} when ``file`` is missing or not ours."""
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError):
        return {}
    steps = data.get("steps") if isinstance(data, dict) and data.get("version") == VERSION else None
    if not isinstance(steps, dict):
        return {}
    return {k: v for k, v in steps.items() if isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)}


def load(graded: Path, old: Path | None = None) -> dict[str, int]:
    """The steps of ``graded``'s notebooks; while none are kept, those an older version kept in the
    progress directory ``old``."""
    target = path(graded)
    if old is not None and not target.exists():
        return read(old / BESIDE_PROGRESS)
    return read(target)


def left_behind(old: Path | None) -> bool:
    """Whether the progress directory ``old`` still holds an older version's counts (to move)."""
    return old is not None and (old / BESIDE_PROGRESS).is_file()


def save(graded: Path, steps: dict[str, int], old: Path | None = None) -> Path:
    """Replace ``graded``'s file with ``steps`` (a temporary file and a rename: a grade stopped
    halfway leaves the old counts whole); then drop the older version's copy in ``old``."""
    target = path(graded)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{FILE_NAME}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"version": VERSION, "steps": dict(sorted(steps.items()))}, f, indent=2)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if old is not None:
        (old / BESIDE_PROGRESS).unlink(missing_ok=True)  # moved: this file is the one read from now on
    return target
