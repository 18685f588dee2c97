"""Whether a process still runs, read from ``/proc`` without signalling it.

Shared by the command's warm-judge client (which must not import torch) and the judge's view of a
learner's process. A process that ended but was not yet collected by its parent (state ``Z``) or
is being torn down (``X``) no longer runs.
"""

from __future__ import annotations


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]  # the name in parentheses may hold spaces
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")
