"""Course settings from ``bertlab.toml`` at the course root; command-line options win over them.

```toml
[grade]
timeout = 300        # seconds per notebook
memory_limit = 4096  # MB for the process running a notebook's cells, and all it starts
jobs = 2             # notebooks graded at once
scheduler = "tcp://grading-host:8786"  # bertlab autograde: a Dask scheduler's address (optional)
```
"""

from __future__ import annotations

import tomllib
from pathlib import Path

FILE = "bertlab.toml"
GRADE_KEYS = {"timeout": float, "memory_limit": float, "jobs": int, "scheduler": str}
# What grading uses where neither the command line nor bertlab.toml says: the one place they are typed.
DEFAULT_TIMEOUT = 300.0  # seconds per notebook
DEFAULT_MEMORY_MB = 4096.0  # for the learner's process and all it starts (its process tree)
DEFAULT_JOBS = 2  # notebooks graded at once
# Processes a notebook's code may have running below its own at once, however detached. Not a
# setting: a right notebook starts none (a DataLoader's workers, a few); the limit is there for
# fork loops, and the number that stops one does not depend on the course.
PROCESS_LIMIT = 64
DEFAULTS: dict[str, float | int] = {"timeout": DEFAULT_TIMEOUT, "memory_limit": DEFAULT_MEMORY_MB, "jobs": DEFAULT_JOBS}


class SettingsError(Exception):
    """``bertlab.toml`` cannot be used; the message names the file, the key and the fix."""


def grade_settings(root: Path | None) -> dict:
    """The ``[grade]`` table of ``root/bertlab.toml`` (empty when there is no such file)."""
    path = root / FILE if root else None
    if path is None or not path.is_file():
        return {}
    try:
        table = tomllib.loads(path.read_text()).get("grade", {})
    except tomllib.TOMLDecodeError as err:
        raise SettingsError(f"{path}: not valid TOML ({err})") from err
    settings = {}
    for key, value in table.items():
        if key not in GRADE_KEYS:
            raise SettingsError(f"{path}: unknown key grade.{key}; known: {', '.join(GRADE_KEYS)}")
        kind = GRADE_KEYS[key]
        if kind is str:
            if not isinstance(value, str) or not value.strip():
                raise SettingsError(
                    f'{path}: grade.{key} must be an address in quotes, e.g. "tcp://host:8786", got {value!r}'
                )
            settings[key] = value.strip()
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or value <= 0
            or (kind is int and value != int(value))
        ):
            raise SettingsError(
                f"{path}: grade.{key} must be a positive {'whole ' if kind is int else ''}number, got {value!r}"
            )
        settings[key] = kind(value)
    return settings
