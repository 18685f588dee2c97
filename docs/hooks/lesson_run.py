"""Lessons execute under known conditions, and their cached pages are keyed on all of them.

- Figures whatever the environment says: the kernel mkdocs-jupyter starts inherits this
  process's environment, and with ``MPLBACKEND=Agg`` (pytest, headless servers) ``plt.show()``
  draws nothing. The kernel gets matplotlib's inline backend, as in JupyterLab.
- mkdocs-jupyter keys its cache of executed lessons on the notebook's text and its own options
  only. A page also depends on the ``bertlab`` source, the environment the kernel runs in, the
  Python and library versions: the cache directory is named after a hash of all of them, so an
  entry made under other conditions is never served. Directories of other keys are removed
  after the build: with one course directory, they would only grow.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
import shutil
import sys
from pathlib import Path

log = logging.getLogger("mkdocs.hooks.lesson_run")

# What ipykernel itself sets when MPLBACKEND is unset: plt.show() emits a PNG output.
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
# Environment variables read by matplotlib, the course, Hugging Face, torch's thread pools and
# its choice of CPU kernels (ATEN_CPU_CAPABILITY: the kernels decide the last bits of every number).
KEY_ENV_PREFIXES = (
    "ATEN_",
    "MPL",
    "BERTLAB_",
    "HF_",
    "TRANSFORMERS_",
    "TOKENIZERS_",
    "TORCH",
    "OMP_",
    "MKL_",
    "OPENBLAS_",
    "PYTHONHASHSEED",
    "CUDA_VISIBLE_DEVICES",
)
# Not part of the key: strictness decides what the build does with a page's claims, which the
# claims hook checks again from every page, cached or not; the page itself does not depend on it.
KEY_ENV_IGNORED = ("BERTLAB_CLAIMS",)

_cache_root: Path | None = None
_cache_dir: Path | None = None


def _tree_hash(digest, root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())


def _kernel_argv(name: str) -> list[str]:
    """The command the kernel runs with, which decides its Python and its packages."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        return KernelSpecManager().get_kernel_spec(name or "python3").argv
    except NoSuchKernel:
        return [f"no kernel named {name!r}"]


def conditions(package: Path, kernel_name: str) -> dict[str, object]:
    """Everything a lesson's page depends on besides the lesson file and mkdocs-jupyter's options."""
    source = hashlib.sha256()
    _tree_hash(source, package)
    for hook in (
        "lesson_run.py",
        "lessons_parallel.py",
        "lesson_render.py",
    ):  # how the lessons are executed
        source.update(Path(__file__).with_name(hook).read_bytes())
    return {
        "source": source.hexdigest(),
        "env": sorted(
            (k, v) for k, v in os.environ.items() if k.startswith(KEY_ENV_PREFIXES) and k not in KEY_ENV_IGNORED
        ),
        "python": sys.version,
        "kernel": _kernel_argv(kernel_name),
        "distributions": sorted(
            f"{d.metadata['Name']}=={d.version}".lower() for d in importlib.metadata.distributions()
        ),
    }


def cache_key(package: Path, kernel_name: str) -> str:
    return hashlib.sha256(repr(conditions(package, kernel_name)).encode()).hexdigest()[:16]


def on_config(config):
    global _cache_root, _cache_dir
    # Set before any kernel starts: every lesson kernel of this build inherits it.
    os.environ["MPLBACKEND"] = INLINE_BACKEND
    root = Path(config.config_file_path).parent
    jupyter = config.plugins["mkdocs-jupyter"].config
    if _cache_root is None:  # `mkdocs serve` calls on_config again with the rewritten dir
        _cache_root = (root / jupyter["cache_dir"]).resolve()
    _cache_dir = _cache_root / cache_key(root / "src" / "bertlab", jupyter["kernel_name"])
    jupyter["cache_dir"] = str(_cache_dir)
    log.debug("executed lessons cached in %s", _cache_dir)
    return config


def on_post_build(config):
    if _cache_root is None or not _cache_root.is_dir():
        return
    for stale in _cache_root.iterdir():
        if stale.is_dir() and stale != _cache_dir:
            shutil.rmtree(stale)
