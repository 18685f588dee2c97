"""What a learner's process keeps: the files it may read, and the environment it starts with.

A learner's code runs as the same user as the instructor's. Everything that user can read, the
code could copy into its own feedback: the hidden tests and reference solutions (``solutions/``),
classmates' submissions and the gradebook (``instructor/``), the working copies of other
notebooks graded at the same time, and the tokens and passwords in the environment the grading
command was started with. So the learner's process may read only what running a notebook needs
(``readable``, on Linux with Landlock: ``platforms/linux``), never beneath ``unreadable``, and
every process it descends from, the judge's included, starts with ``environment`` instead of the
instructor's whole one: what a fork inherits in memory cannot leak what was never there.
"""

from __future__ import annotations

import importlib.util
import os
import re
import site
import sys
import sysconfig
import tempfile
from pathlib import Path

# Packages whose code the learner's process cannot read (where the platform confines reads): the
# tasks are to write BERT's modules, and these hold complete ones. The grader's parts, and the
# pretrained model a notebook loads, are the course's own modules there (``bertlab.bert``).
UNREADABLE_PACKAGES = ("transformers", "sentence_transformers")


def package_folders(names: tuple[str, ...] = UNREADABLE_PACKAGES) -> list[str]:
    """The installed folders of the packages ``names``, found without importing them."""
    folders: list[str] = []
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        folders += list(spec.submodule_search_locations or []) if spec is not None else []
    return folders


def course_folders() -> list[str]:
    """The course's own folder (``solutions/``, ``instructor/``, the cache of recorded
    activations), for the installed package and for the notebook's folder: the learner's process
    reads the package's code there, nothing else."""
    import bertlab
    from bertlab.grading.notebooks import course_root

    found = {course_root(Path(bertlab.__file__).resolve().parent), course_root(Path.cwd().resolve())}
    return sorted(str(root) for root in found if root is not None)


def readable() -> list[str]:
    """Python, its standard library and installed packages, and the course's package code."""
    import bertlab

    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths |= {p for key, p in sysconfig.get_paths().items() if key in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths |= set(site.getsitepackages()) | {site.getusersitepackages()}
    paths.add(str(Path(bertlab.__file__).resolve().parent))
    return sorted(p for p in paths if p and os.path.isdir(p))


def unreadable() -> list[str]:
    """What no readable path may open up: the packages that hold BERT's modules, the course's
    folder, the user's home (a Python installed there stays readable: it is named) and the
    temporary folder, where other notebooks are graded (the notebook's own folder is granted)."""
    folders = package_folders() + course_folders() + [tempfile.gettempdir()]
    home = os.path.expanduser("~")
    return folders + ([home] if home not in ("/", "") else [])


# What the environment of a judge, its learner processes and their kernels keeps: the settings
# of Python, its numerical libraries, the locale and the course, by name. Anything else (a cloud
# token, a password, an SSH agent's socket, the address of the instructor's own services) stays
# in the command that was started with it.
_KEPT_NAMES = {
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR",
    "VIRTUAL_ENV", "LD_LIBRARY_PATH", "NO_COLOR", "COLUMNS", "CI",
    "HF_HUB_OFFLINE", "HF_HUB_DISABLE_PROGRESS_BARS", "TRANSFORMERS_OFFLINE", "TRANSFORMERS_VERBOSITY",
}  # fmt: skip
_KEPT_PREFIXES = (
    "BERTLAB_", "PYTHON", "LC_", "XDG_", "OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_",
    "ATEN_", "TORCH_", "MPL", "JUPYTER_", "JPY_", "IPYTHON", "NBGRADER_",
)  # fmt: skip
# A kept prefix still never carries a secret by its name.
_SECRET = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|_KEY$|^KEY|AUTH", re.IGNORECASE)


def kept(name: str) -> bool:
    return (name in _KEPT_NAMES or name.startswith(_KEPT_PREFIXES)) and not _SECRET.search(name)


def environment(env: dict[str, str] | os._Environ | None = None) -> dict[str, str]:
    """``env`` (default: this process's) less every variable a learner's code has no use for."""
    source = os.environ if env is None else env
    return {name: value for name, value in source.items() if kept(name)}
