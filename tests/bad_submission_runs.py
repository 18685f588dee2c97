"""The two ``grade()`` runs of every bad submission, once per session, shared by two test modules.

``test_bad_submissions.py`` checks each case's verdict in them; ``test_portable_path.py`` compares
the portable path's verdicts for the process cases with them (the same ``grade()``, options and
folders), rather than grading those cases a second time on the Linux path. Both modules are in
the xdist group ``GROUP``, so one worker grades the runs once for both (a session fixture is per
worker). The fixtures are registered in ``tests/conftest.py``.
"""

from __future__ import annotations

import hashlib
import inspect
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bertlab.grading import grade
from tests.submissions import build_course

GROUP = "bad-submissions"
# Per-run grading options. "main": long enough that no honest notebook times out on a busy
# machine. "limits": what the endless loops and the runaway allocation run into. The right
# notebook graded beside them fits in it many times over (1.4 s on the Linux path, 2.3 s on the
# portable path, with two other processes spinning on the two cores), but the loops' verdicts
# name the cell that was running: on the portable path, under a full suite's load, starting a
# notebook (`import torch`) took over 15 s, so a 15 s limit named that cell instead of the loop.
# Each endless loop spins on a core for the whole limit.
OPTIONS: dict[str, dict[str, float | None]] = {
    "main": {"timeout": 300.0, "memory_mb": None},
    "limits": {"timeout": 30.0, "memory_mb": 3000},
}


@dataclass
class Graded:
    """One ``grade()`` run: its report by task, the submitted files' digests, its duration."""

    tasks: dict
    before: dict[Path, str]
    after: dict[Path, str]
    seconds: float
    options: dict


def digest(folder: Path) -> dict[Path, str]:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def memory_parameter() -> str | None:
    """The name of ``grade()``'s memory limit parameter, if it has one (it is being added)."""
    names = [name for name in inspect.signature(grade).parameters if name.startswith("memory")]
    return names[0] if names else None


def grade_run(folder: Path, run: str) -> Graded:
    # grade()'s keyword arguments, the memory limit's name found at run time: values of several types
    options: dict[str, Any] = {"timeout": OPTIONS[run]["timeout"], "jobs": 2}
    memory = memory_parameter()
    if memory and OPTIONS[run]["memory_mb"]:
        options[memory] = OPTIONS[run]["memory_mb"]
    before = digest(folder)
    start = time.perf_counter()
    report = grade(folder, [], **options)
    seconds = time.perf_counter() - start
    return Graded({t.task: t for t in report.tasks}, before, digest(folder), seconds, options)


@pytest.fixture(scope="session")
def bad_submissions_course(tmp_path_factory) -> dict[str, Path]:
    """Every case's notebook in the folder of its run: ``{run: folder}``."""
    return build_course(tmp_path_factory.mktemp("course"))


@pytest.fixture(scope="session")
def main_run(bad_submissions_course) -> Graded:
    return grade_run(bad_submissions_course["main"], "main")


@pytest.fixture(scope="session")
def limits_run(bad_submissions_course) -> Graded:
    return grade_run(bad_submissions_course["limits"], "limits")
