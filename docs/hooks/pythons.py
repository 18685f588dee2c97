"""The Pythons the course admits, written into the pages from the Makefile's ``PYTHONS`` line.

The Makefile holds the one list: its gate refuses any other Python and prints the list,
``tests/test_wheels.py`` resolves the pins for each, and this hook fills a page's placeholders
from it, so no page types the list by hand. pyproject.toml and README.md cannot be generated:
``tests/test_pythons.py`` fails when they say otherwise.

- ``<!-- pythons -->``: "3.11, 3.12, 3.13 or 3.14"
- ``<!-- pythons: range -->``: "3.11 to 3.14"
- ``<!-- pythons: later -->``: all but the first, "3.12 to 3.14"
- ``<!-- pythons: next -->``: the next Python, not admitted yet (``NEXT_PYTHON``)
- ``<!-- pythons: held back by -->``: the pins that have no build for it (``NEXT_PYTHON_HELD_BY``)
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.exceptions import PluginError

MAKEFILE = Path(__file__).resolve().parents[2] / "Makefile"
PLACEHOLDER = re.compile(r"<!-- pythons(?:: ([a-z ]+))? -->")


def variable(name: str, makefile: Path = MAKEFILE) -> str:
    """A ``NAME := value`` line of the Makefile, as written."""
    found = re.search(rf"^{name} := (.*)$", makefile.read_text(), re.M)
    if not found:
        raise PluginError(f"the Makefile sets no {name}")
    return found.group(1).strip()


def admitted(makefile: Path = MAKEFILE) -> list[str]:
    return variable("PYTHONS", makefile).split()


def held_back(makefile: Path = MAKEFILE) -> list[tuple[str, str]]:
    """NEXT_PYTHON_HELD_BY's "torch 2.13.0, numpy 2.4.6 and PyYAML 6.0.3" as (name, version) pairs."""
    items = re.split(r", | and ", variable("NEXT_PYTHON_HELD_BY", makefile))
    return [(name, version) for name, version in (item.split() for item in items)]


def listed(versions: list[str]) -> str:
    """A choice, as the pages and the Makefile's message name it: "3.11, 3.12 or 3.13"."""
    return versions[0] if len(versions) == 1 else ", ".join(versions[:-1]) + " or " + versions[-1]


def span(versions: list[str]) -> str:
    """A run of consecutive minors (tests/test_pythons.py checks they are): "3.11 to 3.13"."""
    return " to ".join(versions[:1] + versions[1:][-1:])


def texts(makefile: Path = MAKEFILE) -> dict[str | None, str]:
    versions = admitted(makefile)
    return {
        None: listed(versions),
        "range": span(versions),
        "later": span(versions[1:]),
        "next": variable("NEXT_PYTHON", makefile),
        "held back by": variable("NEXT_PYTHON_HELD_BY", makefile),
    }


def fill(markdown: str, makefile: Path = MAKEFILE) -> str:
    known = texts(makefile)

    def one(match: re.Match) -> str:
        if match.group(1) not in known:
            raise PluginError(f"unknown placeholder {match.group(0)}: the Makefile gives {sorted(map(str, known))}")
        return known[match.group(1)]

    return PLACEHOLDER.sub(one, markdown)


def on_page_markdown(markdown, page, config, files):
    return fill(markdown) if "<!-- pythons" in markdown else markdown
