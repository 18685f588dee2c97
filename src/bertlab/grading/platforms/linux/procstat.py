"""A process's state, parent and memory, read from ``/proc`` without signalling it.

Shared by the command's warm-judge client (which must not import torch), the judge's view of a
learner's process, and the benchmark's count of the warm judges' memory. A process that ended but
was not yet collected by its parent (state ``Z``) or is being torn down (``X``) no longer runs.
"""

from __future__ import annotations

import os


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the name (state, parent, ...), or None when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # the name in parentheses may hold spaces
    except (OSError, IndexError):
        return None
    return fields if len(fields) >= 2 else None


def running(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def parent(pid: int) -> int | None:
    """The pid of ``pid``'s parent, or None when it is gone."""
    fields = _stat(pid)
    return int(fields[1]) if fields else None


def rss_mb(pid: int) -> float:
    """The resident memory of ``pid`` in MB (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def descendants(root: int) -> list[int]:
    """Every process under ``root`` (children, their children, ...), read from ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (up := parent(int(entry))) is not None:
            children.setdefault(up, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found
