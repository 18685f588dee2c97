"""How a failed check shows in a notebook: the learner's cell, then the message.

IPython renders an exception that has ``_render_traceback_`` by the lines that method returns
(``CheckFailed`` has one). Its default traceback would show the grader's frames first (bertlab's
files, three lines of their source each) above the message; those frames are left out here, and
so are IPython's own and any installed library's: what is left is code the learner wrote.
"""

from __future__ import annotations

import sys
import sysconfig
import traceback
from pathlib import Path

import bertlab

# Where code the learner did not write lives: this package, the standard library, installed packages.
_NOT_THE_LEARNERS = tuple(
    str(Path(p).resolve())
    for p in {
        str(Path(bertlab.__file__).parent),
        sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
        sys.prefix,
    }
)


def _learners(frame: traceback.FrameSummary) -> bool:
    return not str(Path(frame.filename).resolve()).startswith(_NOT_THE_LEARNERS)


def learner_traceback(err: BaseException) -> list[str]:
    """``err``'s traceback through the learner's code only, then its type and message."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if _learners(f)]
    lines = []
    for frame in frames:
        where = f"line {frame.lineno}" + ("" if frame.name == "<module>" else f", in {frame.name}")
        lines.append(f"Your code, {where}:" + (f"\n    {frame.line.strip()}" if frame.line else ""))
    return [*lines, f"{type(err).__name__}: {err}"]
