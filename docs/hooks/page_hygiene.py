"""What an executed notebook's outputs look like on a page, and what the site leaves out.

nbconvert renders every output a kernel sent, the way it was sent. On a lesson page that shows:

- an ``Out[N]:`` prompt beside nothing: a cell whose only output is invisible (the lessons' last
  cell writes their claims into the page as a ``<script>``, ``claims.py``) keeps its output, but
  no prompt;
- one printout split into several blocks: ``print`` lines that reached the kernel in separate
  messages (a loop printing a table row per step) are separate outputs. Consecutive outputs of
  one stream are joined into one block;
- a stray value under a printout or a figure: a cell that prints its result or draws a chart and
  ends with an expression (``claims.claim(...)``, which returns whether the claim holds) also
  shows that expression's ``repr``, ``True`` under a formatted table or a chart. A cell that
  printed or drew shows what it printed and drew only.

And the site has no sitemap: a sitemap lists absolute addresses, and the course is served
wherever a learner runs ``make start`` (any host, any port), so there is no address to list.
mkdocs writes an empty one without ``site_url``; it is removed after the build.
``tests/test_page_hygiene.py`` checks each of these on the built site.
"""

from __future__ import annotations

from pathlib import Path

from bs4 import BeautifulSoup, Tag

import page_memo

NOTEBOOK_DIRS = ("lessons/", "exercises/")
STREAMS = ("text/plain", "application/vnd.jupyter.stderr")  # the mime types nbconvert gives stdout, stderr
SITEMAPS = ("sitemap.xml", "sitemap.xml.gz")


def _output(child: Tag) -> Tag | None:
    found = child.find("div", class_="jp-OutputArea-output")
    return found if isinstance(found, Tag) else None


def mime_type(child: Tag) -> str | None:
    """The mime type nbconvert rendered an output as (``text/plain`` for stdout), if any."""
    output = _output(child)
    found = output.get("data-mime-type") if output is not None else None
    return found if isinstance(found, str) else None


def is_stream(child: Tag) -> bool:
    """A ``print`` output (stdout or stderr), not a value the cell returned or displayed."""
    classes = list(child.get("class") or [])
    return mime_type(child) in STREAMS and not any(
        c in classes for c in ("jp-OutputArea-executeResult", "jp-OutputArea-displayData")
    )


def is_result(child: Tag) -> bool:
    return "jp-OutputArea-executeResult" in list(child.get("class") or [])


def is_figure(child: Tag) -> bool:
    """A chart the cell drew (``plt.show()``): displayed data that is an image, not a returned value."""
    output = _output(child)
    return not is_result(child) and output is not None and output.find(["img", "svg", "canvas"]) is not None


def visible_text(child: Tag) -> str:
    """What a reader sees of an output: its text without scripts; an image counts as visible."""
    output = _output(child)
    if output is None:
        return ""
    if output.find(["img", "svg", "table", "iframe", "video", "canvas"]):
        return "[figure]"
    return "".join(s for s in output.find_all(string=True) if s.find_parent("script") is None).strip()


def tidy(content: str) -> str:
    """``content`` with each notebook output area made as described in the module's docstring."""
    soup = BeautifulSoup(content, "html.parser")
    for area in soup.select("div.jp-OutputArea"):
        children = [
            c for c in area.find_all("div", class_="jp-OutputArea-child", recursive=False) if isinstance(c, Tag)
        ]
        kept: list[Tag] = []
        for child in children:
            previous = kept[-1] if kept else None
            if (
                previous is not None
                and is_stream(previous)
                and is_stream(child)
                and mime_type(previous) == mime_type(child)
            ):
                into, more = previous.find("pre"), child.find("pre")
                if into is not None and more is not None:
                    for node in list(more.contents):
                        into.append(node.extract())
                    child.decompose()
                    continue
            printed = any(is_stream(k) or is_figure(k) for k in kept)
            if printed and is_result(child) and mime_type(child) == "text/plain":
                child.decompose()  # the repr of the cell's last expression, under what it printed or drew
                continue
            kept.append(child)
        for child in kept:
            prompt = child.find("div", class_="jp-OutputArea-prompt")
            if prompt is not None and prompt.get_text(strip=True) and not visible_text(child):
                prompt.clear()
    return str(soup)


def on_page_content(content, page, config, files):
    if not page.file.src_uri.startswith(NOTEBOOK_DIRS):
        return content
    return page_memo.remembered(Path(config.config_file_path).parent, __file__, [content], lambda: tidy(content))


def on_post_build(config):
    page_memo.prune(Path(config.config_file_path).parent)
    site = Path(config.site_dir)
    for name in SITEMAPS:
        (site / name).unlink(missing_ok=True)
