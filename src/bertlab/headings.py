"""The anchors the site gives headings: one function, below every module that links a section
(the progress page, the hints, the lessons' predictions)."""

from __future__ import annotations

import re
import unicodedata


def heading_id(section: str) -> str:
    """The id the site gives a lesson heading (Python-Markdown's slug, as on the built lesson pages).

    "Scaled scores" -> ``scaled-scores``; "Task 1.1: `softmax`" -> ``task-11-softmax``: accents
    folded to ASCII, punctuation dropped, lower case, runs of spaces and hyphens as one "-".
    """
    text = unicodedata.normalize("NFKD", section).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)
