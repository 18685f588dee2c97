"""The Pythons the course admits are one list, the Makefile's ``PYTHONS``, wherever they are named.

The gate of ``make start`` and the Setup page (``docs/hooks/pythons.py``) are written from it, and
``tests/test_wheels.py`` resolves the pins for each. pyproject.toml and README.md cannot be
generated: ``disagreements`` reads them, and the pages, and names every text that admits or
names another list. The same goes for the pins the Makefile says keep the next Python out: a pin
that moves makes that sentence stale. Each kind of disagreement is planted in a copy once, so
that a check that could never fail fails here.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from bench import pythons as make_pythons
from mkdocs.exceptions import PluginError
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from tests.docs_hooks import load_hook

ROOT = Path(__file__).resolve().parents[1]
# What disagreements reads, relative to the root (every docs/*.md page too).
FILES = ("Makefile", "pyproject.toml", "README.md", "CONTRIBUTING.md", "constraints.txt", "docs/setup.md")

# "3.11, 3.12 or 3.13": how a text names the choice of Pythons.
CHOICE = re.compile(r"\b3\.\d+(?:, 3\.\d+)* or 3\.\d+\b")
# "3.11 to 3.13": a run of them.
RUN = re.compile(r"\b(3\.\d+) to (3\.\d+)\b")
# `make start PYTHON=python3.12`, `brew install python@3.12`
EXAMPLE = re.compile(r"\bpython[@]?(3\.\d+)\b")


pythons = load_hook("pythons")


def minor(version: str) -> int:
    major, minor = version.split(".")
    return int(minor) if major == "3" else -1


def pins(root: Path) -> dict[str, str]:
    """Every ``==`` pin, of constraints.txt and pyproject.toml (torch is pinned there only)."""
    found: dict[str, str] = {}
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    lines = (root / "constraints.txt").read_text().splitlines() + project["dependencies"]
    for text in lines:
        line = text.split("#", 1)[0].strip()
        if "==" in line:
            requirement = Requirement(line)
            found[canonicalize_name(requirement.name)] = str(requirement.specifier).removeprefix("==")
    return found


def pick_message(makefile: Path) -> str:
    """What the gate tells a learner whose Python is not admitted, as make expands it."""
    done = subprocess.run(
        ["make", "-s", "-f", str(makefile), "--eval", "print-pick: ; @echo '$(PICK_PYTHON)'", "print-pick"],
        capture_output=True,
        text=True,
        cwd=makefile.parent,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def text_problems(name: str, text: str, admitted: list[str]) -> list[str]:
    """A choice that is not the list, a run from the first admitted Python that stops short of
    the last, or an example that is not admitted (runs past the list name the next Python's wheels)."""
    problems = [f"{name} names {c!r}" for c in CHOICE.findall(text) if c != pythons.listed(admitted)]
    for start, end in RUN.findall(text):
        if start == admitted[0] and end in admitted and end != admitted[-1]:
            problems.append(f"{name} names the run {start} to {end}")
    problems += [f"{name} gives python{v} as an example" for v in EXAMPLE.findall(text) if v not in admitted]
    return problems


def disagreements(root: Path) -> list[str]:
    makefile = root / "Makefile"
    admitted = pythons.admitted(makefile)
    problems = []
    if [minor(v) for v in admitted] != list(range(minor(admitted[0]), minor(admitted[0]) + len(admitted))):
        problems.append(f"Makefile: PYTHONS {admitted} are not consecutive 3.x minors, in order")
    if minor(pythons.variable("NEXT_PYTHON", makefile)) != minor(admitted[-1]) + 1:
        problems.append("Makefile: NEXT_PYTHON is not the minor after the last of PYTHONS")

    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    requires = SpecifierSet(project["requires-python"])
    by_requires = [f"3.{m}" for m in range(40) if requires.contains(f"3.{m}.0")]
    if by_requires != admitted:
        problems.append(f"pyproject.toml: requires-python admits {by_requires}")
    prefix = "Programming Language :: Python :: 3."
    classified = [c.rsplit(" ", 1)[1] for c in project.get("classifiers", []) if c.startswith(prefix)]
    if classified != admitted:
        problems.append(f"pyproject.toml: the classifiers name {classified}")

    if pythons.listed(admitted) not in pick_message(makefile):
        problems.append(f"Makefile: the gate's message does not name {pythons.listed(admitted)}")
    for name in ("README.md", "CONTRIBUTING.md"):
        if (root / name).exists():
            problems += text_problems(name, (root / name).read_text(), admitted)
    if not CHOICE.search((root / "README.md").read_text()):
        problems.append("README.md no longer names the Pythons")
    for page in sorted((root / "docs").glob("*.md")):
        markdown = page.read_text()
        # A page writes the list as a placeholder: typed by hand, it goes stale at the next Python.
        problems += [f"docs/{page.name} types {c!r} (write <!-- pythons --> instead)" for c in CHOICE.findall(markdown)]
        problems += text_problems(f"docs/{page.name}", pythons.fill(markdown, makefile), admitted)

    current = pins(root)
    for name, version in pythons.held_back(makefile):
        pinned = current.get(canonicalize_name(name))
        if pinned != version:
            problems.append(f"Makefile: NEXT_PYTHON_HELD_BY names {name} {version}, pinned {pinned}")
    setup = (root / "docs" / "setup.md").read_text().split("{#next-python}", 1)[-1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\S+) \| (\d\S*) \|", setup, re.M)
    if sorted(rows) != sorted(pythons.held_back(makefile)):
        problems.append(f"docs/setup.md: the next Python's table lists {rows}, not NEXT_PYTHON_HELD_BY")
    return problems


def test_every_text_names_the_makefiles_pythons():
    assert disagreements(ROOT) == []


def test_the_setup_page_is_written_from_the_makefile():
    page = pythons.fill((ROOT / "docs" / "setup.md").read_text())
    assert "<!-- pythons" not in page
    assert f"Python **{pythons.listed(pythons.admitted())}**" in page
    assert f"Python {pythons.variable('NEXT_PYTHON')}, not admitted yet {{#next-python}}" in page


def test_an_unknown_placeholder_fails_the_build():
    with pytest.raises(PluginError, match="unknown placeholder"):
        pythons.fill("Python <!-- pythons: newest -->")


PLANTED = {
    # file, text, replacement, a word the problem must contain
    "a Python admitted in the Makefile only": ("Makefile", "PYTHONS := 3.11", "PYTHONS := 3.10 3.11", "pyproject"),
    "requires-python": ("pyproject.toml", '<3.15"', '<3.14"', "requires-python"),
    "a classifier": ("pyproject.toml", '    "Programming Language :: Python :: 3.14",\n', "", "classifiers"),
    "the README's list": ("README.md", "3.13 or 3.14", "3.13", "README.md"),
    "a page's list typed": ("docs/setup.md", "**<!-- pythons -->**", "**3.11, 3.12, 3.13 or 3.14**", "types"),
    "a page's run typed": ("docs/setup.md", "Python <!-- pythons: range -->", "Python 3.11 to 3.13", "run"),
    "an example": ("docs/setup.md", "PYTHON=python3.12", "PYTHON=python3.10", "example"),
    "the gate's message": ("Makefile", "Python $(PYTHONS_LISTED):", "Python 3.11, 3.12 or 3.13:", "gate"),
    "a pin moved": ("constraints.txt", "numpy==2.4.6", "numpy==2.5.5", "NEXT_PYTHON_HELD_BY"),
    "the next Python's table": ("docs/setup.md", "| numpy | 2.4.6 |", "| numpy | 2.5.5 |", "table"),
}


@pytest.mark.parametrize("planted", PLANTED)
def test_a_planted_disagreement_is_named(tmp_path, planted):
    for name in FILES:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    name, old, new, word = PLANTED[planted]
    text = (tmp_path / name).read_text()
    assert old in text, f"{name} no longer has {old!r}: plant another disagreement"
    (tmp_path / name).write_text(text.replace(old, new, 1))
    problems = disagreements(tmp_path)
    assert any(word in problem for problem in problems), problems


# -- make pythons: what ran on each Python, shown on the Setup page from its results file ---------


def test_make_pythons_says_what_it_does_without_root_or_a_venv():
    done = subprocess.run(
        [sys.executable, "-m", "bench.pythons", "--help"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.startswith("usage: make pythons")
    assert all(f"{step}: " in done.stdout for step in make_pythons.STEPS)
    assert "make pythons" in (ROOT / "docs" / "commands.md").read_text()
    assert "<!-- pythons: run -->" in (ROOT / "docs" / "setup.md").read_text()


def test_the_setup_page_shows_every_recorded_run_and_the_output():
    results = json.loads(make_pythons.RESULTS.read_text())
    page = pythons.fill((ROOT / "docs" / "setup.md").read_text())
    for run in results["runs"]:
        assert run["python"] in pythons.admitted(), f"bench/pythons.json still shows Python {run['python']}"
        assert f"| {run['version']} | {run['system']} | `{run['commit']}` | {run['date']} |" in page
    assert "\n".join(results["output"]) in page


def planted(python: str, results: list[str]) -> make_pythons.Run:
    steps = [
        make_pythons.Step(name, command, result, seconds, "71/71" if name == "grade" else "")
        for (name, command), result, seconds in zip(
            make_pythons.commands(python, None).items(), results, (300, 200, 60, 1200), strict=True
        )
    ]
    return make_pythons.Run(
        python, f"{python}.1", "2026-01-02", "abc1234", "Debian testing (x), Linux 6.1 x86_64", steps
    )


def test_the_runs_table_is_written_from_the_commands_records(tmp_path):
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / "bench").mkdir()
    assert "not been run" in pythons.fill("<!-- pythons: run -->", tmp_path / "Makefile")

    first = planted("3.14", ["passed"] * 4)
    make_pythons.record([first], tmp_path / "bench" / "pythons.json")
    second = planted("3.13", ["failed", "not run", "not run", "not run"])
    make_pythons.record([second], tmp_path / "bench" / "pythons.json")
    page = pythons.fill("<!-- pythons: run -->", tmp_path / "Makefile")
    # the earlier run of another Python is kept; the output is this command's own table
    assert "| 3.14.1 | Debian testing (x), Linux 6.1 x86_64 | `abc1234` | 2026-01-02 | passed, 5 min |" in page
    assert "| passed, 3 min: 71/71 | passed, 1 min | passed, 20 min |" in page
    assert "| 3.13.1 |" in page and "| failed, 5 min | not run | not run | not run |" in page
    assert "\n".join(make_pythons.table([second])) in page and "3.14.1  install" not in page
    assert page.index("| 3.14.1 |") < page.index("| 3.13.1 |")
    assert "Admitted, with no run recorded: Python 3.11 and 3.12." in page


def test_a_steps_summary_is_read_from_its_output():
    assert make_pythons.summary("grade", "notebook  score\n05-feed  10/10  passed\ntotal  71/71\n") == "71/71"
    pytest_end = "===== 812 passed, 40 deselected in 301.5s (0:05:01) =====\n"
    assert (
        make_pythons.summary("check", "." * 80 + "\n" + pytest_end) == "812 passed, 40 deselected in 301.5s (0:05:01)"
    )
    assert make_pythons.summary("site", "INFO - Documentation built in 41.20 seconds\n") == (
        "Documentation built in 41.20 seconds"
    )
