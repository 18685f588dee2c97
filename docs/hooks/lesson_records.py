"""What the claims and predictions hooks both read from a lesson page: its records and mode.

Not a hook itself (mkdocs.yml does not list it): the two hooks import it, which works because
mkdocs puts this folder on ``sys.path`` while it loads a hook (``tests/docs_hooks.py`` does the
same). Like the hooks, it must not import the course.
"""

from __future__ import annotations

import json
import operator
import os
import re
from pathlib import PurePosixPath

# The script a lesson's last cell writes: its values, claims and questions, as JSON.
SCRIPT = re.compile(r'<script type="application/vnd\.bertlab\.claims\+json">(.*?)</script>', re.S)
# The same comparisons as bertlab.experiments.claims.OPS.
OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne}


def strict() -> bool:
    """The same switch as ``bertlab.experiments.claims.strict``."""
    return os.environ.get("BERTLAB_CLAIMS", "").strip().lower() == "strict"


def lesson_stem(src_uri: str) -> str | None:
    """``04-add-and-norm`` for ``lessons/04-add-and-norm.py``; None for any other page."""
    path = PurePosixPath(src_uri)
    return path.stem if path.parts[:1] == ("lessons",) and path.suffix == ".py" else None


def read(page_html: str) -> dict | None:
    """The records a lesson page carries, or None."""
    found = SCRIPT.search(page_html)
    return json.loads(found.group(1).replace("<\\/", "</")) if found else None


def holds(record: dict) -> bool:
    """Whether a recorded claim's comparison is true (NaN never holds)."""
    left, right = record["left"], record["right"]
    return left == left and right == right and bool(OPS[record["op"]](left, right))
