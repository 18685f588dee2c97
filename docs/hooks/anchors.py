"""After the build, every link to a fragment points at an id of the page it names.

mkdocs checks that a linked page exists, not that ``#fragment`` does, and never looks inside
notebook pages. This walks the written HTML of every page (body, navigation, table of contents)
and warns, so the strict build fails, for each ``href="#x"`` or ``href="page/#x"`` whose target
page has no element with ``id="x"`` (or ``name="x"``).
"""

from __future__ import annotations

import html.parser
import logging
import posixpath
from pathlib import Path
from urllib.parse import unquote, urlsplit

log = logging.getLogger("mkdocs.hooks.anchors")


class _Page(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        if tag == "a" and attrs.get("href") and "#" in attrs["href"]:
            self.links.append(attrs["href"])


def read(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


def _target(site: Path, page: Path, path: str) -> Path | None:
    """The HTML file a relative link's path names (the page itself for ""), None if not a page."""
    if not path:
        return page
    here = page.parent.relative_to(site).as_posix()
    target = site / posixpath.normpath(posixpath.join(here, unquote(path)))
    if target.is_dir():
        target = target / "index.html"
    return target if target.suffix == ".html" and target.is_file() else None


def broken_anchors(site: Path) -> list[str]:
    """``page: link`` for every fragment link of the site whose fragment is no id of its target."""
    pages = {path: read(path) for path in sorted(site.rglob("*.html")) if path.name != "404.html"}
    broken = []
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith("/") or not parts.fragment:
                continue  # another site, an absolute path (404 page), or "#" (the top)
            target = _target(site, path, parts.path)
            if target is None:
                continue  # a file that is not a page: test_internal_links_resolve's business
            if target not in pages:
                pages[target] = read(target)
            if unquote(parts.fragment) not in pages[target].ids:
                broken.append(f"{path.relative_to(site).as_posix()}: {link}")
    return broken


def on_post_build(config):
    site = Path(config.site_dir)
    for problem in broken_anchors(site):
        log.warning("link to a missing anchor: %s", problem)
