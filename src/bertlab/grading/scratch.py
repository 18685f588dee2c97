"""The grader's temporary folders: named for the process that made them, swept when it is gone.

They hold learners' notebooks and the source notebooks with their hidden tests. A process that
ends normally removes its own; one that is killed (a Dask worker sent SIGKILL, a grade command
killed outright) cannot. Every folder is therefore named ``bertlab-<kind>-<pid>-<random>``, and
``sweep`` removes those whose process no longer runs: each pool does it when it starts, so the
next grading on the machine cleans up after the last one that died.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

# bertlab-<kind>-<pid>-<what tempfile adds>
_NAME = re.compile(r"^bertlab-(?P<kind>[a-z]+)-(?P<pid>\d+)-")


def mkdtemp(kind: str) -> str:
    """A new folder ``bertlab-<kind>-<this pid>-...`` in the system's temporary folder."""
    return tempfile.mkdtemp(prefix=f"bertlab-{kind}-{os.getpid()}-")


@contextlib.contextmanager
def folder(kind: str) -> Iterator[str]:
    """``mkdtemp(kind)``, removed on every way out of the block that a living process takes."""
    path = mkdtemp(kind)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it runs
        return True
    return True


def sweep(root: str | None = None) -> list[Path]:
    """Remove the grader's folders whose process has ended; return what was removed.

    Only this user's folders are touched (another user's are not ours to judge), and only those
    named by ``mkdtemp``: a folder of any other name is left as it is.
    """
    removed: list[Path] = []
    base = Path(root or tempfile.gettempdir())
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    for path in entries:
        match = _NAME.match(path.name)
        if match is None or _running(int(match["pid"])):
            continue
        try:
            if path.is_symlink() or not path.is_dir() or path.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
