"""How the lessons/ and exercises/ notebooks become course pages.

- Pages written by other authors (lessons, exercises, the FAQ) may not exist yet: the nav skips
  them, and a markdown link to a missing lesson or exercise is shown as plain text, so the
  strict build passes at every stage while a link appears as soon as its page does.
- mkdocs rewrites relative links in markdown pages but not in notebooks: rewrite them here too,
  so a lesson links to ``../exercises/...ipynb`` or ``../docs/assets/bertlayer.svg`` the way
  it would in JupyterLab, and the link works on the site as well.
- Executed lessons are cached by mkdocs-jupyter per notebook text only; key the cache on the
  bertlab package's source too, so a change in the package re-runs every lesson.
"""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import re
import shutil
from pathlib import Path
from urllib.parse import urlsplit

from mkdocs.utils import get_relative_url

log = logging.getLogger("mkdocs.hooks.course")

PENDING = ("lessons/", "exercises/", "faq.md")
NOTEBOOK_DIRS = ("lessons/", "exercises/")
MD_LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s]+)\)")
HTML_LINK = re.compile(r'\b(src|href)="([^"#:]+)(#[^"]*)?"')
HTML_ANCHOR = re.compile(r'<a\s([^>]*?)href="([^"#:]+)(?:#[^"]*)?"[^>]*>(.*?)</a>', re.S)
# nbconvert's MathJax 2 loader (a CDN URL or an empty src): the site loads its own MathJax.
NB_MATHJAX = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.S)

_cache_root: Path | None = None
_cache_dir: Path | None = None


def _source_hash(package: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(path.relative_to(package).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _prune(nav, docs: Path):
    kept = []
    for entry in nav:
        title, value = next(iter(entry.items())) if isinstance(entry, dict) else (None, entry)
        if isinstance(value, list):
            value = _prune(value, docs)
            if not value:
                continue
        elif value.startswith(PENDING) and not (docs / value).exists():
            log.info("nav: %s is not written yet; left out", value)
            continue
        kept.append({title: value} if title is not None else value)
    return kept


def on_config(config):
    global _cache_root, _cache_dir
    root = Path(config.config_file_path).parent
    config.nav = _prune(config.nav, Path(config.docs_dir))
    jupyter = config.plugins["mkdocs-jupyter"].config
    _cache_root = (root / jupyter["cache_dir"]).resolve()
    _cache_dir = _cache_root / _source_hash(root / "src" / "bertlab")
    jupyter["cache_dir"] = str(_cache_dir)
    return config


def _target(src_uri: str, link: str) -> str:
    return posixpath.normpath(posixpath.join(posixpath.dirname(src_uri), link))


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri.startswith(NOTEBOOK_DIRS):
        return markdown  # a notebook's text: mkdocs-jupyter renders it, not markdown

    def keep_or_unlink(match):
        text, link = match.groups()
        path = urlsplit(link).path
        if urlsplit(link).scheme or not path:
            return match.group(0)
        target = _target(page.file.src_uri, path)
        if target.startswith(PENDING) and files.get_file_from_path(target) is None:
            log.info("%s: %s is not written yet; shown without a link", page.file.src_uri, target)
            return text
        return match.group(0)

    return MD_LINK.sub(keep_or_unlink, markdown)


def _resolve(link: str, page, docs: Path) -> str | None:
    """The docs-relative path a notebook's relative link points at, or None if it is a URL."""
    if link.startswith("/") or urlsplit(link).scheme:
        return None
    # docs/lessons is a symlink: "../docs/assets/x.svg", relative to the real lessons/, must
    # resolve from the repository ...
    real = Path(os.path.normpath(Path(os.path.realpath(page.file.abs_src_path)).parent / link))
    if real.is_relative_to(docs):
        return real.relative_to(docs).as_posix()
    # ... and "../exercises/x.ipynb" is the same file seen through docs/exercises.
    return _target(page.file.src_uri, link)


def on_page_content(html, page, config, files):
    if not page.file.src_uri.startswith(NOTEBOOK_DIRS):
        return html
    html = NB_MATHJAX.sub("", html)
    docs = Path(os.path.realpath(config.docs_dir))

    def unlink_pending(match):
        target = _resolve(match.group(2), page, docs)
        if target and target.startswith(PENDING) and files.get_file_from_path(target) is None:
            log.info("%s: %s is not written yet; shown without a link", page.file.src_uri, target)
            return match.group(3)
        return match.group(0)

    def rewrite(match):
        attr, link, fragment = match.group(1), match.group(2), match.group(3) or ""
        target = _resolve(link, page, docs)
        file = files.get_file_from_path(target) if target else None
        if file is None:
            return match.group(0)  # already a URL relative to the page
        return f'{attr}="{get_relative_url(file.url, page.url)}{fragment}"'

    html = HTML_ANCHOR.sub(unlink_pending, html)
    return HTML_LINK.sub(rewrite, html)


def on_post_build(config):
    # Cached lessons of earlier package versions can never be hit again.
    if _cache_root is None or not _cache_root.is_dir():
        return
    for stale in _cache_root.iterdir():
        if stale.is_dir() and stale != _cache_dir:
            shutil.rmtree(stale)
