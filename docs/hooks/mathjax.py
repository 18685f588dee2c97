"""Serve MathJax from the site itself: no CDN is reachable where the course is built or read.

MathJax 3.2.2 comes from the PyPI package ``django-static-mathjax`` (MathJax's own release
files; despite the name it has no dependencies and Django is not needed). Only what the site
loads is copied: the combined TeX component, whose extensions are all built in, so nothing is
fetched on demand, and the CHTML web fonts it references relative to itself.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

PACKAGE = "django-static-mathjax"
VERSION = "3.2.2.1"
DEST = "assets/mathjax"
COMPONENT = "tex-chtml-full.js"
FONTS = "output/chtml/fonts/woff-v2"


def _release_dir() -> Path:
    spec = importlib.util.find_spec("mathjax")
    try:
        version = importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        version = None
    if spec is None or spec.origin is None or version != VERSION:
        raise PluginError(
            f"The site serves MathJax from the {PACKAGE} package, which is not installed "
            f"(found version {version}).\n  Fix: `pip install {PACKAGE}=={VERSION}` in the course venv."
        )
    return Path(spec.origin).parent / "static" / "mathjax"


def on_files(files, config):
    release = _release_dir()
    es5 = release / "es5"
    wanted = [es5 / COMPONENT, *sorted((es5 / FONTS).glob("*.woff")), release / "LICENSE"]
    for path in wanted:
        rel = path.relative_to(es5) if path.is_relative_to(es5) else Path(path.name)
        files.append(File.generated(config, f"{DEST}/{rel.as_posix()}", abs_src_path=str(path)))
    return files
