"""The contributor page's task map, generated from ``bertlab.checks.TASKS`` and the tree.

Each task's code is found by its exercise's slug, the key: exercise ``04-attention-output`` is
``attention_output``, and its checks, known mistakes, mutation tests and check tests are
``src/bertlab/checks/<key>.py``, ``src/bertlab/diagnose/<key>.py``, ``tests/mutations/<key>.py``
and ``tests/test_checks_<key>.py``. The table replaces ``<!-- task map -->`` on the page; the build
fails when a file it names is missing, an exercise has no task, or a file of those folders is
named after no exercise (``tests/test_contributor_map.py`` checks the same without a build).

The hook does not import the course (torch and all): a child process lists the tasks.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError

PAGE = "how-it-is-built.md"
MARKER = "<!-- task map -->"
LIST_TASKS = (
    "import json; from bertlab.checks import TASKS; from bertlab.checks.stages import ORDER; "
    "print(json.dumps({'tasks': [{'id': t.id, 'title': t.title, 'lesson': t.lesson, 'module': type(t).__module__, "
    "'passed': t.passed(t.stages), 'stages': list(t.stages)} for t in TASKS.values()], "
    "'stages': [[s.name, s.question] for s in ORDER]}))"
)
# The learner guide shows what a task that passes prints: `<!-- passed 3.2 -->`, filled from the code.
GUIDE, PASSED = "learner-guide.md", re.compile(r"<!-- passed (\d+\.\d+) -->")
# The stage registry (bertlab.checks.stages) as the guides show it: the learner guide's table of
# checks, and the order the instructor guide names. Neither is typed on a page.
STAGE_TABLE, STAGE_ORDER = "<!-- stage table -->", "<!-- stage order -->"
# Files of the keyed folders that belong to no one exercise.
SHARED = {
    "src/bertlab/diagnose": {"__init__", "common", "simulated", "dropout_measured", "ladders"},
    "tests/mutations": {"__init__"},
}
COLUMNS = ("Task", "Lesson", "Notebook", "Checks", "Known mistakes", "Mutation tests", "Check tests")


@functools.lru_cache(maxsize=2)
def _listed(root: Path) -> dict:
    found = subprocess.run([sys.executable, "-c", LIST_TASKS], check=False, cwd=root, capture_output=True, text=True)
    if found.returncode:
        raise PluginError(f"listing bertlab.checks.TASKS failed:\n{found.stderr[-3000:]}")
    return json.loads(found.stdout)


def list_tasks(root: Path) -> list[dict]:
    """Every task's id, title, lesson, checks module, stages and the line it prints when it passes,
    from a child process that imports the checks (once per build)."""
    return _listed(root)["tasks"]


def list_stages(root: Path) -> list[tuple[str, str]]:
    """The stage registry, in order: (name, question)."""
    return [(name, question) for name, question in _listed(root)["stages"]]


def stage_table(stages: list[tuple[str, str]], tasks: list[dict]) -> str:
    """The learner guide's table: each stage some task runs, its question, and the tasks that run it."""
    lines = ["| Check | Question | Tasks |", "|---|---|---|"]
    for name, question in stages:
        ids = [t["id"] for t in in_order(tasks) if name in t["stages"]]
        if ids:
            lines.append(f"| {name} | {question} | {', '.join(ids)} |")
    return "\n".join(lines)


def stage_order(stages: list[tuple[str, str]], tasks: list[dict]) -> str:
    """The registry's order, as a comma-separated list of the stages some task runs."""
    run = {name for t in tasks for name in t["stages"]}
    return ", ".join(name for name, _ in stages if name in run)


def stage_markers(markdown: str, root: Path) -> str:
    tasks, stages = list_tasks(root), list_stages(root)
    markdown = markdown.replace(STAGE_TABLE, stage_table(stages, tasks))
    return markdown.replace(STAGE_ORDER, stage_order(stages, tasks))


def exercises(root: Path) -> dict[str, str]:
    """Each exercise's key (its slug with underscores) -> its folder name, e.g. ``04-attention-output``."""
    folders = sorted(p for p in (root / "exercises").glob("[0-9][0-9]-*") if p.is_dir())
    return {p.name[3:].replace("-", "_"): p.name for p in folders}


def in_order(tasks: list[dict]) -> list[dict]:
    """The tasks by number: 1.1, 1.2, ..., 7.5."""
    return sorted(tasks, key=lambda task: tuple(int(part) for part in task["id"].split(".")))


def rows(root: Path, tasks: list[dict]) -> list[dict]:
    """One row per task: its id and title, then each piece's path from the repository's root."""
    folders = exercises(root)
    out = []
    for task in in_order(tasks):
        key = task["module"].rsplit(".", 1)[-1]
        folder = folders.get(key, f"NN-{key.replace('_', '-')}")
        out.append(
            {
                "Task": f"{task['id']} {task['title']}",
                "Lesson": f"lessons/{task['lesson']}.py",
                "Notebook": f"exercises/{folder}/{folder}.ipynb",
                "Checks": f"src/bertlab/checks/{key}.py",
                "Known mistakes": f"src/bertlab/diagnose/{key}.py",
                "Mutation tests": f"tests/mutations/{key}.py",
                "Check tests": f"tests/test_checks_{key}.py",
            }
        )
    return out


def problems(root: Path, tasks: list[dict]) -> list[str]:
    """What the tree and the tasks disagree on: each a sentence; none when the table is true."""
    found = []
    table = rows(root, tasks)
    for task, row in zip(in_order(tasks), table, strict=True):  # rows() makes one row per task, in this order
        found += [f"task {task['id']}: no {path}" for path in list(row.values())[1:] if not (root / path).is_file()]
        number = row["Notebook"].split("/")[1][:2]
        if number.isdigit() and int(number) != int(task["id"].split(".")[0]):
            found.append(f"task {task['id']} is checked by {row['Checks']}, the module of exercise {number}")
    keys = {task["module"].rsplit(".", 1)[-1] for task in tasks}
    found += [
        f"exercises/{folder}: no task is checked by src/bertlab/checks/{key}.py"
        for key, folder in exercises(root).items()
        if key not in keys
    ]
    for folder, shared in SHARED.items():
        found += [
            f"{folder}/{p.name} is named after no exercise"
            for p in sorted((root / folder).glob("*.py"))
            if p.stem not in keys | shared
        ]
    return found


def table(root: Path, tasks: list[dict]) -> str:
    """The Markdown table: lessons and notebooks link to their pages, the code is named by its path."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows(root, tasks):
        cells = [
            row["Task"],
            f"[{row['Lesson'][8:-3]}]({row['Lesson']})",
            f"[{row['Notebook'].split('/')[1]}]({row['Notebook']})",
        ]
        cells += [f"`{row[column]}`" for column in COLUMNS[3:]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def passed_lines(markdown: str, tasks: list[dict]) -> str:
    """Each `<!-- passed ID -->` replaced by the line task ID prints when every check passes."""
    lines = {task["id"]: task["passed"] for task in tasks}

    def line(match: re.Match) -> str:
        if match[1] not in lines:
            raise PluginError(f"{GUIDE}: no task {match[1]} to show the passing line of")
        return lines[match[1]]

    return PASSED.sub(line, markdown)


def on_page_markdown(markdown, page, config, files):
    root = Path(config.config_file_path).parent
    if STAGE_TABLE in markdown or STAGE_ORDER in markdown:
        markdown = stage_markers(markdown, root)
    if page.file.src_uri == GUIDE:
        return passed_lines(markdown, list_tasks(root))
    if page.file.src_uri != PAGE:
        return markdown
    tasks = list_tasks(root)
    wrong = problems(root, tasks)
    if wrong:
        raise PluginError(f"{PAGE}: the task map and the tree disagree:\n" + "\n".join(wrong))
    return markdown.replace(MARKER, table(root, tasks))
