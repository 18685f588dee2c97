"""Prose numbers come from the build, and every registered comparison is checked by it.

A lesson records its numbers and comparisons as it runs (``bertlab.experiments.claims``) and its
last cell writes them into the page as a JSON script. This hook reads that script from each
lesson page, then, in every page (lessons, FAQ, guides):

- ``{{ name }}`` becomes the lesson's recorded value, ``{{ 05-feed-forward: name }}`` a value
  of that lesson (how the FAQ and the guides quote a number);
- ``{{ claim: name }}`` (or ``{{ claim: 05-feed-forward: name }}``) becomes a check mark whose
  tooltip shows the two numbers the sentence rests on.

Placeholders inside code are left as they are: there they are examples of the syntax.

A placeholder that names nothing recorded always fails the build. A claim that does not hold
fails it in strict mode (``BERTLAB_CLAIMS=strict``: ``make test``, CI, the test suite), so the
course's own runs never publish a sentence that says the opposite of its number. Anywhere else
(a learner's ``make start`` or ``make site``) the page is built all the same: the claim's mark
becomes a flag that says "does not hold on this machine" with its two numbers, and the build ends
with one warning line naming every such claim. A learner whose CPU rounds differently must still
get the course; the claims are checked under every CPU capability (a build runs each lesson on one
thread) by ``tests/test_claims_under_kernels.py``, where a thin one fails before a learner meets it.

Lesson pages are read while pages are populated, the placeholders filled when they are built, so
the FAQ can quote any lesson whatever the order.
"""

from __future__ import annotations

import html
import json
import logging
import re
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

from lesson_records import holds, lesson_stem, read, strict

log = logging.getLogger("mkdocs.hooks.claims")

# {{ name }}, {{ 05-feed-forward: name }}, {{ claim: name }}, {{ claim: 05-feed-forward: name }}
PLACEHOLDER = re.compile(r"\{\{\s*(claim\s*:\s*)?(?:(\d\d-[a-z0-9-]+)\s*:\s*)?([A-Za-z_][\w.]*)\s*\}\}")
# Code, where a placeholder is an example (the API reference shows the syntax), not a number.
CODE = re.compile(r"(<code[^>]*>.*?</code>|<pre[^>]*>.*?</pre>)", re.S)

# The contributor page's table of claim margins, and the Setup page's list of the CPU conditions
# they were run under, from the file tests/claims_sweep.py writes.
MARGINS_FILE = "tests/claim_margins.json"
MARKERS = {"<!-- claim margins -->": "how-it-is-built.md", "<!-- claim conditions -->": "setup.md"}

_records: dict[str, dict] = {}  # lesson stem -> {"values": .., "claims": ..}
_failed: list[str] = []  # "stem: name" of this build's claims that do not hold (lenient mode)


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
        sides = f"{record['left']:.4g} {record['op']} {record['right']:.4g}"
        if not holds(record):
            return (
                f'<span class="claim claim-fails" title="{html.escape(record["says"])}" role="note">'
                f"(does not hold on this machine: {html.escape(sides)} is false)</span>"
            )
        tip = f"Checked when this page was built: {sides}"
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
    _failed.clear()
    return config


def on_page_content(page_html, page, config, files):
    stem = lesson_stem(page.file.src_uri)
    if stem is None:
        return page_html
    records = read(page_html)
    if records is not None:
        _records[stem] = records
        problems = contradicted(stem, records)
        if problems and strict():
            raise PluginError("A sentence says what its number does not:\n" + "\n".join(problems))
        _failed.extend(f"{stem}: {name}" for name, r in sorted(records.get("claims", {}).items()) if not holds(r))
    return page_html


def margins_table(recorded: dict) -> str:
    """The recorded margins as a Markdown table, thinnest first, with when and where they were run."""
    rows = sorted(recorded["claims"].items(), key=lambda kv: (kv[1]["margin"] is None, kv[1]["margin"] or 0))
    lines = [
        f"Measured on {recorded['measured']} under {'; '.join(recorded['conditions'])}; floor {recorded['floor']:g}.",
        "",
        "| Claim | What the sentence says | Kind | Margin |",
        "|---|---|---|---|",
    ]
    for key, c in rows:
        margin = "holds exactly" if c["margin"] is None else f"{c['margin']:.3g}"
        lines.append(f"| `{key}` | {html.escape(c['says'])} | {c['kind']} | {margin} |")
    return "\n".join(lines)


def on_page_markdown(markdown, page, config, files):
    markers = [m for m, src_uri in MARKERS.items() if src_uri == page.file.src_uri and m in markdown]
    if not markers:
        return markdown
    path = Path(config.config_file_path).parent / MARGINS_FILE
    if not path.is_file():
        raise PluginError(f"{MARGINS_FILE} is missing: run python -m tests.claims_sweep --write")
    recorded = json.loads(path.read_text(encoding="utf-8"))
    filled = {
        "<!-- claim margins -->": margins_table(recorded),
        "<!-- claim conditions -->": "; ".join(f"`{c}`" for c in recorded["conditions"]),
    }
    for marker in markers:
        markdown = markdown.replace(marker, filled[marker])
    return markdown


@event_priority(100)  # before the search plugin indexes the page
def on_page_context(context, page, config, nav):
    page.content, problems = fill(page.content, lesson_stem(page.file.src_uri), _records)
    if problems:
        raise PluginError(f"{page.file.src_uri}:\n" + "\n".join(problems))
    return context


def on_post_build(config):
    """One line naming the claims this machine does not bear out (lenient mode only gets here)."""
    if _failed:
        # Printed, not logged: mkdocs --strict counts logged warnings and would abort the build.
        print(
            f"WARNING -  {len(_failed)} claim(s) of the lessons do not hold on this machine ({'; '.join(_failed)}); "
            "their sentences are marked on their pages. Tell your instructor, with what `make doctor` prints.",
            file=sys.stderr,
        )
