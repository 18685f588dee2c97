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
- ``<!-- pythons: run -->``: what ``make pythons`` (``bench/pythons.py``) last ran on each Python and
  when, a table, then its output, from ``bench/pythons.json``: the page never types a result
"""

from __future__ import annotations

import json
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


# The steps of ``make pythons``, as the table's columns name them.
STEPS = {"install": "install", "grade": "solutions' grade", "site": "site", "check": "`make check`"}


def results_file(makefile: Path = MAKEFILE) -> Path:
    return makefile.parent / "bench" / "pythons.json"


def duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes else f"{round(seconds)} s"


def run_table(makefile: Path = MAKEFILE) -> str:
    """What ``make pythons`` ran on each Python, from its results file."""
    path = results_file(makefile)
    if not path.exists():
        return "`make pythons` has not been run: no result is recorded."
    results = json.loads(path.read_text())
    lines = [
        "| Python | Where | Commit | Date | " + " | ".join(STEPS.values()) + " |",
        "|---" * (4 + len(STEPS)) + "|",
    ]
    for run in results["runs"]:
        steps = {step["step"]: step for step in run["steps"]}
        cells = []
        for name in STEPS:
            step = steps.get(name)
            if step is None or step["result"] == "not run":
                cells.append("not run")
            else:
                said = f"{step['result']}, {duration(step['seconds'])}"
                cells.append(f"{said}: {step['summary']}" if step["summary"] else said)
        where = run["system"].replace("|", "/")
        lines.append(f"| {run['version']} | {where} | `{run['commit']}` | {run['date']} | " + " | ".join(cells) + " |")
    recorded = {run["python"] for run in results["runs"]}
    missing = [version for version in admitted(makefile) if version not in recorded]
    if missing:
        named = missing[0] if len(missing) == 1 else ", ".join(missing[:-1]) + " and " + missing[-1]
        lines += ["", f"Admitted, with no run recorded: Python {named}."]
    output = "\n".join(["```text", f"$ {results['command']}", "...", *results["output"], "```"])
    return "\n".join(lines) + f"\n\nThe end of its output on {results['date']}:\n\n" + output


def texts(makefile: Path = MAKEFILE) -> dict[str | None, str]:
    versions = admitted(makefile)
    return {
        None: listed(versions),
        "range": span(versions),
        "later": span(versions[1:]),
        "next": variable("NEXT_PYTHON", makefile),
        "held back by": variable("NEXT_PYTHON_HELD_BY", makefile),
        "run": run_table(makefile),
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
