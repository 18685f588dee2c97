"""A lesson page's HTML transforms, kept on disk so a warm build does not parse the page again.

Three hooks parse each notebook page whole with BeautifulSoup (``figure_alt``, ``page_hygiene``,
``toc``): lesson pages are about a megabyte of highlighted code and figures, and those parses
were over a third of a warm build. Each transform is a function of the page's HTML and of what
the caller passes as ``inputs`` alone, so its result is kept under a hash of them, of the hook's
own source and of BeautifulSoup's version: a change to any of them computes it anew. Not a hook
(mkdocs.yml does not list it); the hooks import it as they import ``lesson_records``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

FOLDER = Path(".cache") / "page-hooks"  # beside the executed lessons' cache, under the course
_used: set[Path] = set()  # this build's kept results; prune() removes the others


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def remembered(root: Path, hook_file: str, inputs: list[str], compute: Callable[[], Any]) -> Any:
    """``compute()``, or what it returned before for the same ``inputs`` and the same hook source.

    ``root`` is the course's folder (mkdocs.yml's), ``hook_file`` the calling hook's ``__file__``;
    the result must be JSON (a page's HTML, a table of contents). A computation that logs a
    warning is not kept: ``mkdocs build --strict`` fails on it, and must fail again next time.
    """
    digest = hashlib.sha256(Path(hook_file).read_bytes())
    digest.update(importlib.metadata.version("beautifulsoup4").encode())
    for part in inputs:
        digest.update(len(part).to_bytes(8, "little") + part.encode())
    path = root / FOLDER / f"{Path(hook_file).stem}-{digest.hexdigest()[:24]}.json"
    _used.add(path)
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    warnings, mkdocs_log = _Warnings(), logging.getLogger("mkdocs")
    mkdocs_log.addHandler(warnings)
    try:
        result = compute()
    finally:
        mkdocs_log.removeHandler(warnings)
    if warnings.count:
        return result
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.part")  # lessons build in parallel processes
    partial.write_text(json.dumps(result), encoding="utf-8")
    partial.replace(path)
    return result


def prune(root: Path) -> None:
    """Remove the kept results this build did not use (pages since edited, hooks since changed)."""
    folder = root / FOLDER
    if folder.is_dir():
        for path in folder.iterdir():
            if path not in _used:
                path.unlink(missing_ok=True)
    _used.clear()
