"""Example output on the pages, produced by running the code when the site is built.

A page never types what a command prints. It writes a placeholder on a line of its own,
``<!-- example: NAME -->``, and this hook puts what the code prints today in its place, as a
code block. ``NAME`` is one of:

- ``feedback``: the message of the first failing grade cell when a notebook with a known
  mistake is graded (``MISTAKE``, put into the solution of exercise 03);
- ``grade-table``: what ``bertlab grade`` prints for that notebook (``grading.table.render``);
- ``grade-json``: what ``bertlab grade --json`` prints for it (``Report.to_dict``), each heatmap's
  base64 text cut to its first characters;
- ``usage COMMAND``: the usage line ``bertlab COMMAND --help`` starts with (the CLI's own parser);
- ``grade-cells ASSIGNMENT``: the checks each grade cell of a released notebook runs, with its points.

The grade cells are read here. The rest comes from a child process (the hook itself imports
neither torch nor the course), ``python examples.py``, which grades the notebook the way
``bertlab grade`` does, with judges of its own, and asks the CLI's parser. Its samples are cached
in ``.cache/examples/``, keyed on the ``bertlab`` source, the solution notebook, this file,
Python, the installed libraries and the environment, as the lessons are: a rebuild with nothing
changed does not grade again. ``tests/test_build_examples.py`` grades
again without the cache and compares the built pages with what it prints.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDER = re.compile(r"^( *)<!-- example: ([\w-]+(?: [\w.-]+)?) -->$", re.M)
# The terminal width the samples are printed at: the grade table fits its message to the terminal.
COLUMNS = 100
# The graded example: exercise 03's solution with the heads split without the transpose (Task 3.2).
ASSIGNMENT = "03-self-attention"
MISTAKE = (
    "x.view(B, T, self.num_attention_heads, self.attention_head_size).transpose(1, 2)",
    "x.view(B, self.num_attention_heads, T, self.attention_head_size)",
)
HEATMAP_SHOWN = 24  # characters of a heatmap's base64 text the JSON sample keeps
MESSAGE_SHOWN = 60  # characters of a message the JSON sample keeps: its line then fits the page
# Environment variables that can change what the grader prints (as lesson_run.py keys lessons).
KEY_ENV_PREFIXES = ("ATEN_", "BERTLAB_", "HF_", "TRANSFORMERS_", "TOKENIZERS_", "TORCH", "OMP_", "MKL_", "OPENBLAS_")
KEY_ENV_IGNORED = ("BERTLAB_CLAIMS", "BERTLAB_JUDGES_DIR", "BERTLAB_CACHE_DIR")
LANGUAGES = {"grade-json": "json", "grade-cells": "python"}
# The samples graded from solutions/, and what stands in their place in a copy without it.
GRADED = ("feedback", "grade-table", "grade-json")
MISSING = "(this example is graded from the course's solutions/ folder, which this copy does not have)"

_samples: dict[str, str] | None = None


# -- in the child process: run the code ------------------------------------------------------


def mistaken_notebook(root: Path, out: Path) -> Path:
    """Exercise 03's solution with ``MISTAKE`` made, written under ``out`` as a learner's notebook."""
    import nbformat

    source = root / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    notebook = nbformat.read(source, as_version=4)
    cells = [c for c in notebook.cells if c.cell_type == "code" and MISTAKE[0] in c.source]
    if len(cells) != 1 or cells[0].source.count(MISTAKE[0]) != 1:
        raise SystemExit(f"{source}: the example's mistake needs `{MISTAKE[0]}` exactly once")
    cells[0].source = cells[0].source.replace(*MISTAKE)
    target = out / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    target.parent.mkdir(parents=True)
    nbformat.write(notebook, target)
    return out


def shortened(report: dict) -> dict:
    """``report`` with each heatmap's base64 text cut to ``HEATMAP_SHOWN`` characters and each
    message to ``MESSAGE_SHOWN``, with an ellipsis: a message is one JSON line of hundreds of
    characters, which would scroll the page sideways (the feedback example shows one whole)."""
    for task in report["tasks"]:
        for check in task["checks"]:
            if check.get("heatmap"):
                check["heatmap"] = check["heatmap"][:HEATMAP_SHOWN] + "..."
            if len(check.get("message") or "") > MESSAGE_SHOWN:
                check["message"] = check["message"][:MESSAGE_SHOWN].rsplit(" ", 1)[0] + " ..."
    return report


def folded(text: str) -> str:
    """``text`` with each line longer than ``COLUMNS`` broken at spaces, as a terminal of that width
    shows it: the continuation indented two past the line's own indent, and a rule cut to the width.
    On the page a sample then reads without scrolling sideways (a message's details run to some
    200 characters, and the grade table's rule to 113)."""
    lines = []
    for line in text.splitlines():
        if len(line) <= COLUMNS:
            lines.append(line)
            continue
        if len(set(line)) == 1:  # a table's rule: a terminal would wrap it onto a second line
            lines.append(line[:COLUMNS])
            continue
        indent = line[: len(line) - len(line.lstrip())]
        lines += textwrap.wrap(
            line,
            COLUMNS,
            subsequent_indent=indent + "  ",
            break_long_words=False,
            break_on_hyphens=False,
        ) or [line]
    return "\n".join(lines)


def grade_cells(root: Path, assignment: str) -> str:
    """Each grade cell of the released notebook: its code lines, the last with its points.

    Read here, in the build's process (a notebook is JSON): the learner's code in the same file
    is not read, so editing it never makes the samples be produced again.
    """
    notebook = json.loads((root / "exercises" / assignment / f"{assignment}.ipynb").read_text(encoding="utf-8"))
    rows = []
    for cell in notebook["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] != "code" or not meta.get("grade"):
            continue
        source = "".join(cell["source"]).splitlines()
        code = [line for line in source if line.strip() and not line.lstrip().startswith("#")]
        points = float(meta.get("points", 0))
        rows += [(line, "") for line in code[:-1]] + [(code[-1], f"{points:g} point{'' if points == 1 else 's'}")]
    width = max(len(line) for line, note in rows if note)
    return "\n".join(f"{line.ljust(width)}  # {note}" if note else line for line, note in rows)


def collect(root: Path) -> dict[str, str]:
    """Every sample, by name, as the code prints it now."""
    os.environ["COLUMNS"] = str(COLUMNS)  # read by argparse and by the grade table
    from bertlab.cli import _parser
    from bertlab.grading import grade
    from bertlab.grading.table import render
    from bertlab.settings import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT

    samples = {}
    commands = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name, parser in commands.items():
        samples[f"usage {name}"] = parser.format_usage().strip()
    with tempfile.TemporaryDirectory(prefix="bertlab-examples-") as tmp:
        path = mistaken_notebook(root, Path(tmp))
        report = grade(
            path, [ASSIGNMENT[:2]], timeout=DEFAULT_TIMEOUT, memory_limit=DEFAULT_MEMORY_MB, jobs=1, warm=False
        )
    failed = [c for t in report.tasks for c in t.checks if not c.passed]
    if not failed:
        raise SystemExit(f"the example's mistake in {ASSIGNMENT} failed no check")
    samples["feedback"] = folded(failed[0].message)
    samples["grade-table"] = folded(render(report))
    samples["grade-json"] = json.dumps(shortened(report.to_dict()), indent=2)
    return samples


# -- in the build: fill the placeholders -----------------------------------------------------


def cache_key(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted((root / "src" / "bertlab").rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + path.read_bytes())
    for path in [Path(__file__), root / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"]:
        digest.update(path.read_bytes())
    digest.update(sys.version.encode())
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith(KEY_ENV_PREFIXES) and k not in KEY_ENV_IGNORED)
    digest.update(repr(env).encode())
    installed = sorted(f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions())
    digest.update(repr(installed).encode())
    return digest.hexdigest()[:16]


def run_collect(root: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """The samples from a new child process (no cache), run with ``env`` (default: this process's)."""
    command = [sys.executable, __file__, str(root)]
    found = subprocess.run(command, check=False, cwd=root, capture_output=True, text=True, env=env)
    if found.returncode:
        raise RuntimeError(f"producing the pages' example output failed:\n{found.stderr[-3000:]}")
    return json.loads(found.stdout)


def samples(root: Path) -> dict[str, str]:
    """The samples of this build: from the cache when nothing they depend on changed."""
    global _samples
    if _samples is None:
        if not (root / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").is_file():
            # A copy of the course without the instructors' solutions/: nothing to grade an example from.
            _samples = {name: MISSING for name in GRADED}
        else:
            _samples = cached(root)
        for folder in sorted((root / "exercises").glob("[0-9][0-9]-*")):
            if (folder / f"{folder.name}.ipynb").is_file():
                _samples[f"grade-cells {folder.name}"] = grade_cells(root, folder.name)
    return _samples


def cached(root: Path) -> dict[str, str]:
    cache = root / ".cache" / "examples"
    file = cache / f"{cache_key(root)}.json"
    if file.is_file():
        return json.loads(file.read_text(encoding="utf-8"))
    found = run_collect(root)
    cache.mkdir(parents=True, exist_ok=True)
    for stale in cache.glob("*.json"):
        stale.unlink()
    partial = file.with_suffix(".partial")
    partial.write_text(json.dumps(found), encoding="utf-8")
    partial.replace(file)
    return found


def block(name: str, text: str, indent: str = "") -> str:
    """``text`` as a fenced code block, indented like its placeholder."""
    language = LANGUAGES.get(name.split()[0], "text")
    fence = "````" if "```" in text else "```"
    lines = [f"{fence}{language}", *text.splitlines(), fence]
    return "\n".join(indent + line if line else line for line in lines)


def fill(markdown: str, found: dict[str, str], where: str = "") -> str:
    """Each placeholder of ``markdown`` replaced by its sample; an unknown name is an error."""

    def one(match: re.Match) -> str:
        if match[2] not in found:
            from mkdocs.exceptions import PluginError

            raise PluginError(f"{where}: no example output named {match[2]!r} (known: {', '.join(sorted(found))})")
        return block(match[2], found[match[2]], match[1])

    return PLACEHOLDER.sub(one, markdown)


def on_page_markdown(markdown, page, config, files):
    if not PLACEHOLDER.search(markdown):
        return markdown
    return fill(markdown, samples(Path(config.config_file_path).parent), page.file.src_uri)


def on_config(config):
    global _samples
    _samples = None  # `mkdocs serve` builds again in the same process: the code may have changed
    return config


if __name__ == "__main__":
    # Whatever the grader prints on its way must not be read as the answer.
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    json.dump(collect(Path(sys.argv[1])), answer)
    answer.close()
