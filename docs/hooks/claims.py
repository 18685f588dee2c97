"""Prose numbers come from the build, and every registered comparison is checked by it.

A lesson records its numbers and comparisons as it runs (``bertlab.experiments.claims``) and its
last cell writes them into the page as a JSON script. This hook reads that script from each
lesson page, then, in every page (lessons, FAQ, guides):

- ``{{ name }}`` becomes the lesson's recorded value, ``{{ 05-feed-forward: name }}`` a value
  of that lesson (how the FAQ and the guides quote a number);
- ``{{ claim: name }}`` (or ``{{ claim: 05-feed-forward: name }}``) becomes a check mark whose
  tooltip shows the two numbers the sentence rests on.

Placeholders inside code are left as they are: there they are examples of the syntax.

The build fails when a placeholder names nothing recorded, or a claim does not hold: a sentence
cannot say the opposite of its number. Lesson pages are read while pages are populated, the
placeholders filled when they are built, so the FAQ can quote any lesson whatever the order.
"""

from __future__ import annotations

import html
import json
import logging
import operator
import re
from pathlib import PurePosixPath

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

log = logging.getLogger("mkdocs.hooks.claims")

SCRIPT = re.compile(r'<script type="application/vnd\.bertlab\.claims\+json">(.*?)</script>', re.S)
# {{ name }}, {{ 05-feed-forward: name }}, {{ claim: name }}, {{ claim: 05-feed-forward: name }}
PLACEHOLDER = re.compile(r"\{\{\s*(claim\s*:\s*)?(?:(\d\d-[a-z0-9-]+)\s*:\s*)?([A-Za-z_][\w.]*)\s*\}\}")
# Code, where a placeholder is an example (the API reference shows the syntax), not a number.
CODE = re.compile(r"(<code[^>]*>.*?</code>|<pre[^>]*>.*?</pre>)", re.S)
# The same comparisons as bertlab.experiments.claims.OPS: the hook must not import the course.
OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne}

_records: dict[str, dict] = {}  # lesson stem -> {"values": .., "claims": ..}


def lesson_stem(src_uri: str) -> str | None:
    path = PurePosixPath(src_uri)
    return path.stem if path.parts[:1] == ("lessons",) and path.suffix == ".py" else None


def read(page_html: str) -> dict | None:
    """The records a lesson page carries, or None."""
    found = SCRIPT.search(page_html)
    return json.loads(found.group(1).replace("<\\/", "</")) if found else None


def holds(record: dict) -> bool:
    left, right = record["left"], record["right"]
    return left == left and right == right and bool(OPS[record["op"]](left, right))  # NaN never holds


def contradicted(stem: str, records: dict) -> list[str]:
    """A line per claim of ``records`` that does not hold."""
    return [
        f"{stem}: claim {name!r} does not hold ({r['left']:.6g} {r['op']} {r['right']:.6g} is false); "
        f"the prose says: {r['says']}"
        for name, r in sorted(records.get("claims", {}).items())
        if not holds(r)
    ]


def fill(page_html: str, here: str | None, records: dict[str, dict]) -> tuple[str, list[str]]:
    """``page_html`` with its placeholders filled from ``records``; and what could not be filled."""
    problems: list[str] = []

    def replace(found: re.Match) -> str:
        is_claim, stem, name = bool(found.group(1)), found.group(2) or here, found.group(3)
        kind = "claims" if is_claim else "values"
        record = records.get(stem or "", {}).get(kind, {}).get(name)
        if record is None:
            problems.append(f"{found.group(0)} names no {kind[:-1]} recorded by lesson {stem or '(none: name one)'}")
            return found.group(0)
        if not is_claim:
            return html.escape(record["text"])
        tip = f"Checked when this page was built: {record['left']:.4g} {record['op']} {record['right']:.4g}"
        return f'<span class="claim" title="{html.escape(tip)}" aria-label="checked claim">&#10003;</span>'

    parts = CODE.split(page_html)  # odd parts are code: a placeholder shown as an example stays
    return "".join(p if i % 2 else PLACEHOLDER.sub(replace, p) for i, p in enumerate(parts)), problems


def unfilled(page_html: str) -> list[str]:
    """The placeholders left in a built page's prose (code aside)."""
    return [
        found.group(0)
        for i, part in enumerate(CODE.split(page_html))
        if i % 2 == 0
        for found in PLACEHOLDER.finditer(part)
    ]


def on_config(config):
    _records.clear()  # `mkdocs serve` builds again in the same process
    return config


def on_page_content(page_html, page, config, files):
    stem = lesson_stem(page.file.src_uri)
    if stem is None:
        return page_html
    records = read(page_html)
    if records is not None:
        _records[stem] = records
        problems = contradicted(stem, records)
        if problems:
            raise PluginError("A sentence says what its number does not:\n" + "\n".join(problems))
    return page_html


@event_priority(100)  # before the search plugin indexes the page
def on_page_context(context, page, config, nav):
    page.content, problems = fill(page.content, lesson_stem(page.file.src_uri), _records)
    if problems:
        raise PluginError(f"{page.file.src_uri}:\n" + "\n".join(problems))
    return context
