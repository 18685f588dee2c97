"""The contributor's map is true: the task table matches the tree, the layers import downwards,
and every path and command ``CONTRIBUTING.md`` and "How the course is built" name exists."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.docs_hooks import load_hook
from tests.test_import_cycles import graph

# One worker runs them with the site's tests (`--dist loadgroup`): one reads the built site.
pytestmark = pytest.mark.xdist_group("site")

PAGES = [ROOT / "CONTRIBUTING.md", ROOT / "docs" / "how-it-is-built.md"]
# What a command writes, named by the pages but not in the tree: the command that writes it.
OUTPUTS = {"bench/results/profile-grade.svg": "make profile"}
# From the bottom: a module imports only from its own layer and the ones below.
LAYERS = [
    {
        "reference",
        "model_files",
        "bert",
        "capture",
        "corpus",
        "masks",
        "pooling",
        "settings",
        "headings",
        "notebook_guesses",
        "given_parts",
        "dispatch_mode",
    },
    {"diagnose", "experiments"},
    {"checks"},
    {"grading"},
    {
        "cli",
        "instructor",
        "doctor",
        "release",
        "progress",
        "hints",
        "hint_steps",
        "nbgrader_verdicts",
        "nbgrader_feedback",
        "nbgrader_execute",
        "kernel_template",
        "terminated",
        "",
    },
]


task_map = load_hook("task_map")


def tasks() -> list[dict]:
    """What the hook's child process lists, from this process's import of the checks."""
    from bertlab.checks import TASKS

    return [{"id": t.id, "title": t.title, "lesson": t.lesson, "module": type(t).__module__} for t in TASKS.values()]


# -- the task table ----------------------------------------------------------------------------


def test_every_path_of_the_task_table_exists_and_every_exercise_has_a_row():
    rows = task_map.rows(ROOT, tasks())
    missing = [path for row in rows for column, path in row.items() if column != "Task" and not (ROOT / path).is_file()]
    assert missing == []
    notebooks = {row["Notebook"] for row in rows}
    assert notebooks == {str(p.relative_to(ROOT)) for p in ROOT.glob("exercises/[0-9][0-9]-*/[0-9][0-9]-*.ipynb")}
    assert task_map.problems(ROOT, tasks()) == []


def _tree(tmp_path: Path) -> Path:
    """The files the task table names, and the keyed folders' other files, copied to ``tmp_path``."""
    for path in [*(p for row in task_map.rows(ROOT, tasks()) for c, p in row.items() if c != "Task"),
                 "src/bertlab/diagnose/common.py", "tests/mutations/__init__.py"]:  # fmt: skip
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, tmp_path / path)
    return tmp_path


@pytest.mark.parametrize(
    ("plant", "found"),
    [
        (lambda t: (t / "tests/mutations/task04.py").touch(), "tests/mutations/task04.py is named after no exercise"),
        (lambda t: (t / "src/bertlab/diagnose/add_norm.py").touch(), "diagnose/add_norm.py is named after no exercise"),
        (lambda t: (t / "tests/test_checks_feed_forward.py").unlink(), "no tests/test_checks_feed_forward.py"),
        (lambda t: (t / "src/bertlab/diagnose/embeddings.py").unlink(), "no src/bertlab/diagnose/embeddings.py"),
        (lambda t: (t / "exercises/08-new-task").mkdir(), "exercises/08-new-task: no task"),
    ],
)
def test_a_missing_or_misnamed_file_is_found(tmp_path, plant, found):
    tree = _tree(tmp_path)
    assert task_map.problems(tree, tasks()) == []
    plant(tree)
    assert any(found in problem for problem in task_map.problems(tree, tasks())), task_map.problems(tree, tasks())


@pytest.mark.slow
def test_the_built_page_shows_every_task(site):
    page = (site / "how-it-is-built" / "index.html").read_text(encoding="utf-8")
    assert task_map.MARKER not in page
    shown = re.findall(r"<td>(\d+\.\d+) ", page)
    assert shown == [t["id"] for t in task_map.in_order(tasks())]


def test_the_learner_guide_shows_the_passing_line_the_code_prints(site):
    """Example output is made by the code: the guide's passing line is `Task.passed`'s, so it
    counts the checks the task has today; no page types one in by hand."""
    from bertlab.checks import TASKS

    page = (site / "learner-guide" / "index.html").read_text(encoding="utf-8")
    task = TASKS["3.2"]
    assert task.passed(task.stages) in page and "<!-- passed" not in page
    typed = [p.name for p in (ROOT / "docs").glob("*.md") if re.search(r"passed \(\d+/\d+ checks\)", p.read_text())]
    assert not typed, f"a passing line typed by hand: {typed}"


def test_the_guides_show_every_stage_the_registry_has(site):
    from bertlab.checks.stages import ORDER, STAGES

    page = (site / "learner-guide" / "index.html").read_text(encoding="utf-8")
    assert [s.name for s in ORDER if f"<td>{s.name}</td>" in page] == list(STAGES)
    assert "<!-- stage" not in page
    instructor = (site / "instructor-guide" / "index.html").read_text(encoding="utf-8")
    assert ", ".join(STAGES) in instructor and "<!-- stage" not in instructor


# -- the layers ----------------------------------------------------------------------------------


def layer(module: str) -> int:
    name = module.split(".")[1] if "." in module else ""
    (found,) = [i for i, members in enumerate(LAYERS) if name in members]
    return found


def test_every_module_has_a_layer_and_imports_only_downwards():
    up = [f"{a} imports {b}" for a, bs in graph().items() for b in bs if layer(b) > layer(a)]
    assert up == []


# -- the paths and commands the pages name -------------------------------------------------------


def code(markdown: str) -> list[str]:
    """The page's code: each line of a fenced block, each inline code span."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", markdown, re.M | re.S)
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", markdown, flags=re.M | re.S))
    return [line.split("#")[0].strip() for block in blocks for line in block.splitlines()] + spans


def named_paths(markdown: str) -> set[str]:
    """Repository paths in the page's code: words that start with a top-level file or folder."""
    top = {p.name for p in ROOT.iterdir()} - {".git", ".venv"}
    words = {w.strip("`,;:()") for text in code(markdown) for w in text.split()}
    return {w for w in words if w.split("/")[0] in top and ("/" in w or "." in w)}


def existing(path: str) -> bool:
    """``path`` exists; ``<key>`` and ``NN-slug`` stand for every exercise, ``*`` for some file."""
    folders = sorted(p.name for p in ROOT.glob("exercises/[0-9][0-9]-*"))
    if "NN-slug" in path:
        return all(existing(path.replace("NN-slug", folder)) for folder in folders)
    if "<key>" in path:
        return all(existing(path.replace("<key>", folder[3:].replace("-", "_"))) for folder in folders)
    return any(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_path_the_page_names_exists(page):
    paths = named_paths(page.read_text())
    assert len(paths) > 10, sorted(paths)  # the extraction finds them
    missing = [p for p in sorted(paths) if not existing(p) and p not in OUTPUTS]
    assert missing == []
    makefile = (ROOT / "Makefile").read_text()
    assert all(path in makefile and f"\n{command.split()[1]}:" in makefile for path, command in OUTPUTS.items())


def commands(markdown: str) -> list[list[str]]:
    """Each ``bertlab ...`` and ``make ...`` command line of the page's code, as words."""
    found = []
    for text in code(markdown):
        for start in re.finditer(r"(?:^|\s)((?:bertlab|make) [^`]*)", text):
            words = shlex.split(start.group(1).replace("NN-slug", "05-feed-forward").replace(" NN", " 05"))
            found.append([w for w in words if not w.startswith("<")])
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_the_page_names_runs(page, capsys):
    from bertlab import cli

    named = commands(page.read_text())
    assert any(c[0] == "bertlab" for c in named) and any(c[0] == "make" for c in named), named
    targets = set(re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), re.M))
    for words in named:
        if words[0] == "make":
            assert words[1] in targets, words
            continue
        if len(words) > 2:  # a command line, not a command's name: its options and arguments as written
            cli._parser().parse_args(words[1:])
        with pytest.raises(SystemExit) as ended:
            cli._parser().parse_args([words[1], "--help"])
        assert ended.value.code == 0, words


def test_every_name_of_the_glossary_is_in_the_code():
    """The glossary of grading's processes (``how-it-is-built.md``) names modules and classes that exist."""
    import importlib

    page = (ROOT / "docs" / "how-it-is-built.md").read_text()
    section = page.split("## Who grades: the processes and their names", 1)[1].split("\n## ", 1)[0]
    names = set(re.findall(r"`(bertlab(?:\.\w+)+)`", section))
    assert len(names) >= 12, sorted(names)
    for name in sorted(names):
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):  # the longest importable module, then attributes
            try:
                found = importlib.import_module(".".join(parts[:cut]))
                break
            except ImportError:
                continue
        for attribute in parts[cut:]:
            assert hasattr(found, attribute), f"{name}: no {attribute}"
            found = getattr(found, attribute)
    bare = set(re.findall(r"`([A-Z]\w+)`", section))  # classes named without their module
    for cls in bare:
        assert any(name.endswith(f".{cls}") for name in names), cls
