"""What a learner reads in a course file, for the tests that check the course's prose."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat


def markdown_cells(path: Path) -> list[str]:
    """The markdown a learner reads in ``path``: notebook cells, lesson comment cells, a page."""
    if path.suffix == ".ipynb":
        return [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"]
    if path.suffix == ".py":  # jupytext percent format: "# %% [markdown]" then "# " lines
        cells = []
        for block in re.split(r"^# %%", path.read_text(), flags=re.M)[1:]:
            header, _, body = block.partition("\n")
            if "[markdown]" in header:
                cells.append("\n".join(re.sub(r"^# ?", "", line) for line in body.splitlines() if line.startswith("#")))
        return cells
    return [path.read_text()]
