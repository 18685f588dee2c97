"""Each figure of a lesson carries the description written next to the code that draws it.

nbconvert gives an output image an alt text only through output metadata, which ``plt.show()``
does not set, and otherwise writes "No description has been provided for this image". A lesson
describes its figure in the header of the cell that draws it, as jupytext cell metadata:
``# %% alt="Bar chart: parameters per part of the model"``, or, when it is too long for one line,
in a comment that opens the cell (``# alt: ...``); this hook puts that text on the cell's
images. A figure without a description, or a cell description that no image receives, is a
warning: the strict build fails.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import jupytext
from bs4 import BeautifulSoup

from page_memo import remembered

log = logging.getLogger("mkdocs.hooks.figure_alt")

NOTEBOOK_DIRS = ("lessons/", "exercises/")
NBCONVERT_DEFAULT = "No description has been provided for this image"
# A description too long for a lesson's line (100 columns, lessons/ruff.toml) opens its cell
# instead: "# alt: ..." and continuation lines "#   ...". The page does not show it as code
# (lesson_code.py).
ALT_COMMENT = re.compile(r"\A# alt: (.*(?:\n#   .*)*)")


def description(cell) -> str:
    """The cell's figure description: its ``alt`` metadata, or the comment that opens it."""
    found = ALT_COMMENT.match(cell.source)
    text = cell.metadata.get("alt", "") or (found.group(1).replace("\n#   ", " ") if found else "")
    return " ".join(str(text).split())


def shown_code_cells(path: Path, removed_tags: set[str]) -> list:
    """The notebook's code cells the page shows, in order (cells with a removal tag are dropped)."""
    notebook = jupytext.read(path)
    return [
        cell
        for cell in notebook.cells
        if cell.cell_type == "code" and not removed_tags.intersection(cell.metadata.get("tags", []))
    ]


def describe(content: str, cells: list, where: str) -> str:
    """``content`` with each code cell's ``alt`` metadata on the images of its outputs."""
    soup = BeautifulSoup(content, "html.parser")
    # mkdocs-jupyter's template wraps nbconvert's code cell in a second div of the same classes
    rendered = [div for div in soup.select("div.jp-CodeCell") if div.find_parent("div", class_="jp-CodeCell") is None]
    if len(rendered) != len(cells):
        log.warning(
            "%s: %d code cells rendered, %d in the source: figure descriptions not applied",
            where,
            len(rendered),
            len(cells),
        )
        return content
    for number, (div, cell) in enumerate(zip(rendered, cells, strict=True), start=1):
        images = div.select(".jp-OutputArea img")
        alt = description(cell)
        if alt and not images:
            log.warning("%s: code cell %d has a description (alt) but draws no figure", where, number)
        for image in images:
            if alt:
                image["alt"] = alt
            elif image.get("alt", "") in ("", NBCONVERT_DEFAULT):
                log.warning(
                    "%s: code cell %d draws a figure without a description: add alt=\"...\" to its '# %%%%' line",
                    where,
                    number,
                )
    return str(soup)


def on_page_content(content, page, config, files):
    if not page.file.src_uri.startswith(NOTEBOOK_DIRS):
        return content
    tags = config.plugins["mkdocs-jupyter"].config["remove_tag_config"].get("remove_cell_tags", [])
    cells = shown_code_cells(Path(page.file.abs_src_path), set(tags))
    root = Path(config.config_file_path).parent
    # keyed on each shown cell's description: the only part of the source the result depends on
    alts = [description(cell) for cell in cells]
    return remembered(root, __file__, [content, *alts], lambda: describe(content, cells, page.file.src_uri))
