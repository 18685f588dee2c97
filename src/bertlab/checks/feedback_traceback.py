"""How a failed check shows in a notebook: the learner's cell, then the message.

IPython renders an exception that has ``_render_traceback_`` by the lines that method returns
(``CheckFailed`` has one). Its default traceback would show the grader's frames first (bertlab's
files, three lines of their source each) above the message; those frames are left out here, and
so are IPython's own and any installed library's: what is left is code the learner wrote, and
the grade cell that called the check.

A grade cell is locked: the learner did not write its ``check(...)`` line, so its frame is
labelled "The check cell", not "Your code". It is told apart by what it is: a frame at the top
level of its cell whose line calls the course's ``check`` (the next frame is that function), in a
cell that holds nothing but ``check(...)`` calls and comments, as every grade cell does. A
``check`` the learner calls from their own code, or from a cell with code of theirs, stays theirs.
"""

from __future__ import annotations

import ast
import linecache
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


# The course's ``check``, the function a grade cell calls.
_CHECK_FILE = str((Path(bertlab.__file__).parent / "checks" / "__init__.py").resolve())


def _learners(frame: traceback.FrameSummary) -> bool:
    return not str(Path(frame.filename).resolve()).startswith(_NOT_THE_LEARNERS)


def _is_check_call(node: ast.stmt) -> bool:
    """``check(...)`` as a statement of its own."""
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "check"
    )


def _check_cell(frame: traceback.FrameSummary, callee: traceback.FrameSummary | None) -> bool:
    """Whether ``frame`` is a grade cell's: the top level of a cell of ``check(...)`` calls only,
    calling the course's ``check`` (``callee``, the next frame inward)."""
    if frame.name != "<module>" or callee is None or callee.name != "check":
        return False
    if str(Path(callee.filename).resolve()) != _CHECK_FILE:
        return False
    try:
        body = ast.parse("".join(linecache.getlines(frame.filename))).body
    except (SyntaxError, ValueError):
        return False
    return bool(body) and all(_is_check_call(node) for node in body)


def learner_traceback(err: BaseException) -> list[str]:
    """``err``'s traceback through the learner's code only (a grade cell's frame labelled as the
    check cell), then its type and message."""
    everything = traceback.extract_tb(err.__traceback__)
    lines = []
    for i, frame in enumerate(everything):
        if not _learners(frame):
            continue
        callee = everything[i + 1] if i + 1 < len(everything) else None
        whose = "The check cell" if _check_cell(frame, callee) else "Your code"
        where = f"line {frame.lineno}" + ("" if frame.name == "<module>" else f", in {frame.name}")
        lines.append(f"{whose}, {where}:" + (f"\n    {frame.line.strip()}" if frame.line else ""))
    return [*lines, f"{type(err).__name__}: {err}"]
