"""The nbgrader course a command works on: its configuration and its collected submissions."""

from __future__ import annotations

import glob
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path


class CourseError(Exception):
    """The course cannot be graded as asked; the message says why and what to run."""


@dataclass(frozen=True)
class Submission:
    """One student's collected assignment: ``submitted/<student>/<assignment>/``."""

    student: str
    assignment: str
    folder: Path

    @property
    def key(self) -> str:
        return f"{self.student}/{self.assignment}"

    def notebooks(self) -> list[Path]:
        return sorted(self.folder.glob("*.ipynb"))


def load(root: Path):
    """nbgrader's configuration and CourseDirectory for the course at ``root``.

    Loading ``nbgrader_config.py`` also runs it, as nbgrader does (the course's file puts the
    venv's ``bin/`` on PATH for the gradebook's ``alembic``).
    """
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    if not (root / "nbgrader_config.py").is_file():
        raise CourseError(f"{root} holds no nbgrader_config.py (point --course at the course directory)")
    config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    coursedir = CourseDirectory(config=config)
    if not os.path.isabs(coursedir.root):
        coursedir.root = str((root / coursedir.root).resolve())
    return config, coursedir


def submissions(coursedir, assignments: list[str], students: list[str] | None = None) -> list[Submission]:
    """Every collected submission of ``assignments`` by ``students`` (all when empty), sorted by student."""
    pattern = coursedir.format_path(coursedir.submitted_directory, "*", "*")
    found = []
    for folder in sorted(glob.glob(pattern)):
        assignment, student = os.path.basename(folder), os.path.basename(os.path.dirname(folder))
        if (
            os.path.isdir(folder)
            and (not assignments or assignment in assignments)
            and (not students or student in students)
        ):
            found.append(Submission(student, assignment, Path(folder)))
    return found


def fingerprint(submission: Submission, source_dir: Path) -> str:
    """A hash of the submitted files and of the assignment's source: a new one means regrade."""
    digest = hashlib.sha256()
    for folder in (submission.folder, source_dir):
        for path in sorted(p for p in folder.rglob("*") if p.is_file() and ".ipynb_checkpoints" not in p.parts):
            digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
