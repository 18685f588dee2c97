"""Instructors: make exercises/ from solutions/ with ``nbgrader generate_assignment``.

``exercises/`` is never edited by hand; ``check`` regenerates into a temporary directory and
reports any notebook that differs from the committed release.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat


def generate(root: Path, release_dir: Path, assignment: str = "*") -> None:
    """Run nbgrader's generate_assignment for ``assignment`` (a name or ``*``) into ``release_dir``."""
    bindir = str(Path(sys.executable).parent)
    with tempfile.TemporaryDirectory(prefix="bertlab-release-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "nbgrader",
            "generate_assignment",
            "--force",
            f"--assignment={assignment}",
            f"--CourseDirectory.release_directory={release_dir.resolve()}",
            # The gradebook of a local release is throwaway: keep it out of the repository.
            f"--CourseDirectory.db_url=sqlite:///{tmp}/gradebook.db",
        ]
        # nbgrader shells out to `alembic` from the same venv.
        env = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    if proc.returncode != 0 or "ERROR" in proc.stderr:
        errors = [line for line in proc.stderr.splitlines() if "ERROR" in line or "Error" in line]
        raise RuntimeError("nbgrader generate_assignment failed:\n" + "\n".join(errors[-10:]))


def _cells(path: Path) -> list[tuple]:
    nb = nbformat.read(path, as_version=4)
    return [(c.cell_type, c.source, c.metadata.get("nbgrader")) for c in nb.cells]


def drift(root: Path) -> list[str]:
    """Notebooks in ``exercises/`` that differ from a fresh release of ``solutions/``."""
    with tempfile.TemporaryDirectory(prefix="bertlab-release-check-") as tmp:
        fresh = Path(tmp) / "exercises"
        generate(root, fresh)
        committed = root / "exercises"
        names = {p.relative_to(fresh) for p in fresh.rglob("*.ipynb")}
        names |= {p.relative_to(committed) for p in committed.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts}
        problems = []
        for name in sorted(names):
            if not (committed / name).exists():
                problems.append(f"exercises/{name} is missing")
            elif not (fresh / name).exists():
                problems.append(f"exercises/{name} has no source in solutions/")
            elif _cells(committed / name) != _cells(fresh / name):
                problems.append(f"exercises/{name} differs from its release")
        return problems
