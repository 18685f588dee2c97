"""Tables of contents that read as the headings they link to, math typeset.

Markdown pages: Python-Markdown's TOC keeps a heading's arithmatex math as the bare text
``\\(4H\\)``, which the site's MathJax (it typesets ``.arithmatex`` elements only) never sees;
each such span is put back in an arithmatex element.

Notebook pages: the TOC is rebuilt from the headings the page really has.

mkdocs-jupyter builds a notebook's TOC from a markdown export with every code span deleted, and
slugs it with Python-Markdown: a heading "Task 1.1: `softmax`" becomes "Task 1.1:" linking to
``#task-11``, while nbconvert wrote ``id="task-11-softmax"``; "What `intermediate.dense` is"
shows as "What is"; "$W^O$ adds the heads up" shows its TeX. Here each entry is the heading's
text (code as text, TeX typeset by the site's MathJax) and links to the id in the page.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from bs4 import BeautifulSoup, NavigableString
from mkdocs.structure.toc import get_toc

from page_memo import remembered

NOTEBOOK_DIRS = ("lessons/", "exercises/")
HEADING = re.compile(r"^h([1-6])$")
# Inline TeX as a notebook's markdown writes it; "$$" display math does not occur in headings.
INLINE_TEX = re.compile(r"(?<![\\$])\$([^$\n]+)\$")


def _text(node) -> str:
    """The visible text of a heading: code as its text, nbconvert's "¶" anchor left out."""
    if isinstance(node, NavigableString):
        return str(node)
    if "anchor-link" in (node.get("class") or []):
        return ""
    return "".join(_text(child) for child in node.children)


def title_html(heading) -> str:
    """A TOC entry for ``heading``: escaped text, each $...$ as a span the site's MathJax typesets."""
    text = " ".join(_text(heading).split())
    parts, end = [], 0
    for match in INLINE_TEX.finditer(text):
        parts.append(html.escape(text[end : match.start()], quote=False))
        parts.append(f'<span class="arithmatex">\\({html.escape(match.group(1), quote=False)}\\)</span>')
        end = match.end()
    parts.append(html.escape(text[end:], quote=False))
    return "".join(parts)


def toc_tokens(content: str, depth: int = 6) -> list[dict]:
    """Nested TOC tokens (mkdocs' format) of the markdown cells' headings in ``content``."""
    soup = BeautifulSoup(content, "html.parser")
    flat: list[dict[str, Any]] = [
        {"level": int(h.name[1]), "id": h["id"], "name": title_html(h), "children": []}
        for cell in soup.select(".jp-MarkdownCell")
        for h in cell.find_all(HEADING)
        if h.get("id") and int(h.name[1]) <= depth
    ]
    nested: list[dict[str, Any]] = []
    open_: list[dict[str, Any]] = []
    for token in flat:
        while open_ and open_[-1]["level"] >= token["level"]:
            open_.pop()
        (open_[-1]["children"] if open_ else nested).append(token)
        open_.append(token)
    return nested


ARITHMATEX_TEXT = re.compile(r"\\\((.+?)\\\)")


def _typeset_titles(items) -> None:
    for item in items:
        item.title = ARITHMATEX_TEXT.sub(r'<span class="arithmatex">\\(\1\\)</span>', item.title)
        _typeset_titles(item.children)


def on_page_content(content, page, config, files):
    if page.file.src_uri.startswith(NOTEBOOK_DIRS):
        depth = config.plugins["mkdocs-jupyter"].config["toc_depth"]
        root = Path(config.config_file_path).parent
        page.toc = get_toc(remembered(root, __file__, [content, str(depth)], lambda: toc_tokens(content, depth)))
    else:
        _typeset_titles(page.toc)
    return content
