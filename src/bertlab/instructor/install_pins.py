"""What a grading machine other than the instructor's installs, read from where the course pins it.

Gradescope's image (``bertlab gradescope``) and a GitHub Classroom runner (``bertlab classroom``)
install the course as ``make`` does: pip at the Makefile's pin, torch alone and first from PyTorch's
CPU-only index (PyPI's Linux torch is a CUDA build of several GB, and neither has a GPU), then the
course under constraints.txt. Each value is read from the file that holds it, never typed again here,
so a pin changed in the course changes what both platforms install.
"""

from __future__ import annotations

import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from bertlab.instructor.course import CourseError

# PyTorch's CPU-only wheel index: the Makefile's TORCH_INDEX for a machine without a GPU.
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"


@dataclass(frozen=True)
class Pins:
    python: str  # "3.12": a Python the Makefile's PYTHONS line admits
    pip: str
    torch: str
    uv: str  # Gradescope's image gets its Python through uv (its Ubuntu's own may not be admitted)
    torch_index: str = CPU_TORCH_INDEX


def _find(pattern: str, text: str, where: str) -> str:
    found = re.search(pattern, text, re.M)
    if not found:
        raise CourseError(f"{where} does not say {pattern!r}: the course's pins could not be read")
    return found.group(1)


def admitted_pythons(root: Path) -> list[str]:
    return _find(r"^PYTHONS := (.*)$", (root / "Makefile").read_text(), "the Makefile").split()


def read(root: Path) -> Pins:
    """The pins of the course at ``root``; the Python is this one when admitted (the pins were
    resolved for it here), else the newest admitted."""
    pythons = admitted_pythons(root)
    here = "{}.{}".format(*sys.version_info[:2])
    deps = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    return Pins(
        python=here if here in pythons else pythons[-1],
        pip=_find(r'pip install .*"pip==([^"]+)"', (root / "Makefile").read_text(), "the Makefile"),
        torch=_find(r"^torch==(\S+)$", "\n".join(deps), "pyproject.toml's dependencies"),
        uv=_find(r"^uv==(\S+)$", (root / "constraints.txt").read_text(), "constraints.txt"),
    )
