"""The comparative sentences of the course's prose, and whether each rests on a registered claim.

A sentence compares when it says one thing is faster, worse, more, the most, the only one, or
falls or grows. It is covered when it carries a ``{{ claim: ... }}`` mark (the build checks the
claim against its numbers) or names the paper it reports (author and year): a paper's finding is
cited, not measured here.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT
from tests.course_text import markdown_cells

GUIDES = ("docs/faq.md", "docs/learner-guide.md", "docs/instructor-guide.md")
COMPARATIVE = re.compile(
    r"\b(faster|slower|better|worse|more than|less than|fewer|most|least|only|falls?|grows?|rises?|"
    r"larger|smaller|largest|smallest|higher|lower|highest|lowest|exceeds?|beats?|dominates?|outweighs?)\b",
    re.I,
)
CLAIM = re.compile(r"\{\{\s*claim\s*:")
PAPER = re.compile(r"et al\.|\b(?:19|20)\d\d[ab]?\b")
SENTENCE_END = re.compile(r"(?<=[.!?:])\s+(?=[A-Z*\[(`$])")


def sources() -> list[Path]:
    return sorted((ROOT / "lessons").glob("[0-9][0-9]-*.py")) + [ROOT / g for g in GUIDES]


def _prose(markdown: str) -> str:
    """Paragraph text without code blocks, display math or table rows."""
    markdown = re.sub(r"^```.*?^```", " ", markdown, flags=re.M | re.S)
    markdown = re.sub(r"\$\$.*?\$\$", " ", markdown, flags=re.S)
    lines = [line for line in markdown.splitlines() if not line.lstrip().startswith(("|", "#", "<"))]
    return "\n".join(lines)


def sentences(path: Path) -> list[str]:
    """The sentences of ``path``'s prose, whitespace collapsed."""
    found = []
    for cell in markdown_cells(path):
        for paragraph in re.split(r"\n\s*\n|\n\s*[-*] |\n\s*\d+\. ", _prose(cell)):
            text = re.sub(r"\s+", " ", paragraph).strip()
            found += [s.strip() for s in SENTENCE_END.split(text) if s.strip()]
    return found


def unclaimed() -> list[str]:
    """``"file: sentence"`` for every comparative sentence with neither a claim mark nor a paper."""
    out = []
    for path in sources():
        for s in sentences(path):
            if COMPARATIVE.search(s) and not CLAIM.search(s) and not PAPER.search(s):
                out.append(f"{path.relative_to(ROOT).as_posix()}: {s}")
    return out
