"""Gradescope's autograder, emulated on this machine: the zip laid out as Gradescope lays out
``/autograder`` under a temporary root, and ``run_autograder`` run there for one submission.

What Gradescope does and this does too: unpack the zip into ``<root>/source``, copy
``run_autograder`` to ``<root>/run_autograder``, put the learner's files in ``<root>/submission``,
run the script from ``<root>`` and read ``<root>/results/results.json``. What it does not: build
the image with ``setup.sh`` (the tests check that file statically); the script runs with this
machine's venv (``BERTLAB_PYTHON``) instead of the image's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema

SCHEMA = json.loads((Path(__file__).parent / "gradescope_results.schema.json").read_text())


def lay_out(archive: Path, root: Path) -> Path:
    """``root`` as Gradescope's /autograder after building the image from ``archive``."""
    source = root / "source"
    with zipfile.ZipFile(archive) as zipped:
        for info in zipped.infolist():
            path = source / info.filename
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(zipped.read(info))
            path.chmod((info.external_attr >> 16) & 0o777 or 0o644)
    shutil.copy2(source / "run_autograder", root / "run_autograder")
    return root


def submit(root: Path, files: dict[str, bytes]) -> None:
    """The learner's files in ``<root>/submission`` (emptied first), name -> content."""
    shutil.rmtree(root / "submission", ignore_errors=True)
    (root / "submission").mkdir()
    for name, data in files.items():
        path = root / "submission" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def run(root: Path, python: str = sys.executable, timeout: float = 600) -> dict:
    """Run ``<root>/run_autograder`` as Gradescope does; its results.json, checked against the schema."""
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "BERTLAB_PYTHON": python}
    done = subprocess.run(
        [str(root / "run_autograder")], cwd=root, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((root / "results" / "results.json").read_text())
    jsonschema.validate(results, SCHEMA)
    return results
