"""How the lessons/ and exercises/ notebooks link like the markdown pages.

mkdocs rewrites relative links in markdown pages (and warns about a missing target) but not in
notebooks: do both here, so a lesson links to ``../exercises/...ipynb`` or
``../docs/assets/bertlayer.svg`` the way it would in JupyterLab, the link works on the site as
well, and a link to a page that does not exist fails the strict build.
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from mkdocs.utils import get_relative_url

log = logging.getLogger("mkdocs.hooks.course")

NOTEBOOK_DIRS = ("lessons/", "exercises/")
HTML_LINK = re.compile(r'\b(src|href)="([^"#:]+)(#[^"]*)?"')
# nbconvert's MathJax 2 loader (a CDN URL or an empty src): the site loads its own MathJax.
NB_MATHJAX = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.S)


def _target(src_uri: str, link: str) -> str:
    return posixpath.normpath(posixpath.join(posixpath.dirname(src_uri), link))


def _resolve(link: str, page, docs: Path) -> str | None:
    """The docs-relative path a notebook's relative link points at, or None if it is a URL."""
    if link.startswith("/") or urlsplit(link).scheme:
        return None
    link = unquote(link)
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

    def rewrite(match):
        attr, link, fragment = match.group(1), match.group(2), match.group(3) or ""
        target = _resolve(link, page, docs)
        if target is None:
            return match.group(0)
        file = files.get_file_from_path(target)
        if file is None:
            log.warning("%s links to '%s', which is not a file of the site (%s)", page.file.src_uri, link, target)
            return match.group(0)
        return f'{attr}="{get_relative_url(file.url, page.url)}{fragment}"'

    return HTML_LINK.sub(rewrite, html)
