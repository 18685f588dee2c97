"""One path through the course: every link a learner follows lands where its words say.

The path is the "Course" section of mkdocs.yml (lessons and exercises interleaved). The walker
reads every markdown link in the exercise notebooks (solutions/ and exercises/), in the lessons'
markdown cells and in docs/*.md, and reports:

- a relative link whose file does not exist, seen from the file that holds it (as JupyterLab and
  the site's hook resolve it);
- a link whose text names a lesson or a task by number ("lesson 4", "Task 3") that is not the
  target's number, or quotes a title in italics that is not the target's first heading;
- a "#fragment" that is none of the target's headings;
- an exercise whose "Read first" names a lesson that comes after it, or leaves out one of the
  lessons between the previous exercise and it;
- an exercise whose "Done?" does not send the reader to the step right after it on the path.

Apart from links, every lesson an exercise needs comes before it on the path: the lessons its
tasks name, its hints and known mistakes cite, and its notebook links outside "Done?" (the home
page promises it, and its path table follows the same order).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import pytest
import yaml
from markdown.extensions.toc import slugify

from tests.conftest import ROOT
from tests.course_text import markdown_cells

LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\[\]]*\])+)\]\(([^)\s]+)\)")
HREF = re.compile(r'\bhref="([^"]+)"')
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]+`")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*(?:\{#([\w-]+)\})?\s*$", re.M)
# "lesson 4", "Lesson 4:", "Task 3", "exercise 06" in a link's text
NUMBERED = re.compile(r"\b(lesson|task|exercise)\s+0*(\d+)\b", re.I)
# a title quoted in italics: *Add & Norm* or _Add & Norm_
QUOTED = re.compile(r"(?<![\w*])[*_]([^*_]+)[*_](?![\w*])")
# "# Lesson 4: Add & Norm", "# Exercise 03: multi-head self-attention"
TITLE = re.compile(r"^(Lesson|Exercise)\s+(\d+):\s*(.+)$")


@dataclass(frozen=True)
class Link:
    source: Path  # the file holding the link, relative to the course root
    cell: str  # where in it: the last heading above the link
    text: str
    url: str


def course_path(root: Path) -> list[Path]:
    """The "Course" section of mkdocs.yml, as files relative to ``root`` (symlinks resolved)."""
    config = yaml.safe_load((root / "mkdocs.yml").read_text())
    for entry in config["nav"]:
        if isinstance(entry, dict) and "Course" in entry:
            entries = [next(iter(e.values())) if isinstance(e, dict) else e for e in entry["Course"]]
            return [_real(root, root / config.get("docs_dir", "docs") / e) for e in entries]
    raise AssertionError("mkdocs.yml has no 'Course' section in its nav")


def _real(root: Path, path: Path) -> Path:
    return Path(os.path.realpath(path)).relative_to(os.path.realpath(root))


def _prose(markdown: str) -> str:
    """``markdown`` without code blocks and code spans, which hold no links."""
    return CODE_SPAN.sub("", FENCE.sub("", markdown))


def headings(path: Path) -> list[tuple[int, str, str | None]]:
    """(level, text, explicit id) of every heading of ``path``, in order."""
    return [
        (len(m.group(1)), m.group(2), m.group(3))
        for cell in markdown_cells(path)
        for m in HEADING.finditer(FENCE.sub("", cell))
    ]


def title(path: Path) -> str | None:
    return next((text for level, text, _ in headings(path) if level == 1), None)


def anchors(path: Path) -> set[str]:
    """The ids of ``path``'s headings on the site.

    mkdocs slugs a page's headings with its toc extension, and mkdocs-jupyter a notebook's the
    same way (lowercase, punctuation dropped, spaces to hyphens); an explicit ``{#id}`` wins.
    """
    return {explicit or slugify(text, "-") for _, text, explicit in headings(path)}


def links(root: Path) -> list[Link]:
    files = sorted(root.glob("solutions/*/*.ipynb")) + sorted(root.glob("exercises/*/*.ipynb"))
    files += sorted(root.glob("lessons/*.py")) + sorted(root.glob("docs/*.md"))
    found = []
    for path in files:
        rel, heading = path.relative_to(root), "(top)"
        for cell in markdown_cells(path):
            prose = _prose(cell)
            # each link is labelled with the last heading above it
            marks = [(m.start(), m.group(2)) for m in HEADING.finditer(prose)]
            for m, text, url in [(m, m.group(2), m.group(3)) for m in LINK.finditer(prose)] + [
                (m, "", m.group(1)) for m in HREF.finditer(prose)
            ]:
                above = [h for start, h in marks if start < m.start()]
                found.append(Link(rel, above[-1] if above else heading, text, url))
            heading = marks[-1][1] if marks else heading
    return found


def target(link: Link) -> Path | None:
    """The file ``link`` points at, relative to the course root, or None for a URL elsewhere."""
    parts = urlsplit(link.url)
    if parts.scheme or parts.netloc or link.url.startswith("/"):
        return None
    if not parts.path:
        return link.source
    return Path(os.path.normpath(link.source.parent / unquote(parts.path)))


def check_link(root: Path, link: Link) -> list[str]:
    where = f"{link.source} ({link.cell}): [{link.text}]({link.url})"
    path = target(link)
    if path is None:
        return []
    if not (root / path).exists():
        return [f"{where}: {path} does not exist"]
    errors = []
    fragment = urlsplit(link.url).fragment
    if fragment and path.suffix in (".md", ".py", ".ipynb") and fragment not in anchors(root / path):
        errors.append(f"{where}: {path} has no heading #{fragment}")
    if path.suffix not in (".md", ".py", ".ipynb") or path == link.source:
        return errors
    heading = title(root / path) or ""
    named = TITLE.match(heading)
    for kind, number in NUMBERED.findall(link.text):
        expected = {"lesson": "Lesson"}.get(kind.lower(), "Exercise")
        if named is None or named.group(1) != expected or int(named.group(2)) != int(number):
            errors.append(f"{where}: says {kind} {number}, but {path} is {heading!r}")
    # the page's title, or with a fragment the section's
    sections = {explicit or slugify(text, "-"): text for _, text, explicit in headings(root / path)}
    titles = [named.group(3) if named else heading] + ([sections.get(fragment, "")] if fragment else [])
    for quoted in QUOTED.findall(link.text):
        if not any(_same_title(quoted, full) for full in titles):
            errors.append(
                f"{where}: quotes the title {quoted!r}, but {path} is {heading!r}"
                + (f" and #{fragment} is {sections.get(fragment)!r}" if fragment else "")
            )
    return errors


def _same_title(quoted: str, full: str) -> bool:
    """The title itself, or its first part up to a comma or colon (case aside)."""
    quoted, full = quoted.strip().casefold(), full.strip().casefold()
    return full == quoted or (full.startswith(quoted) and full[len(quoted)] in ",:;")


def section(cells: list[str], name: str, end: str) -> str:
    """The text of an exercise from the line starting with ``name`` to ``end`` (a lookahead).

    "Read first:" opens a paragraph of the intro (it ends at a blank line); "Done?" is a heading
    of its own (its section ends at the next heading or with the cell).
    """
    for cell in cells:
        match = re.search(rf"^(?:#+\s*)?{re.escape(name)}.*?(?={end}|\Z)", cell, re.M | re.S)
        if match:
            return match.group(0)
    return ""


def check_exercise(root: Path, exercise: Path, path: list[Path]) -> list[str]:
    """Read first and Done? of ``exercise`` (a released or a source notebook) against ``path``."""
    released = Path("exercises") / exercise.relative_to(exercise.parts[0])
    if released not in path:
        return [f"{exercise}: {released} is not on the course path (mkdocs.yml 'Course')"]
    here = path.index(released)
    before = path[:here]
    previous = max((i for i, p in enumerate(before) if p.parts[0] == "exercises"), default=-1)
    since = [p for p in before[previous + 1 :] if p.parts[0] == "lessons"]
    cells = markdown_cells(root / exercise)
    errors = []

    def targets(text: str) -> list[Path]:
        found = [target(Link(exercise, "", m.group(2), m.group(3))) for m in LINK.finditer(_prose(text))]
        return [_real(root, root / p) for p in found if p is not None and (root / p).exists()]

    read_first = [p for p in targets(section(cells, "Read first", r"\n\s*\n")) if p in path]
    if not read_first:
        errors.append(f"{exercise}: no 'Read first' link to a lesson")
    errors += [
        f"{exercise}: 'Read first' names {p}, which comes after it on the path" for p in read_first if p not in before
    ]
    errors += [
        f"{exercise}: 'Read first' leaves out {p}, between the previous exercise and this one"
        for p in since
        if p not in read_first
    ]

    done = [p for p in targets(section(cells, "Done?", "^#")) if p in path]
    following = path[here + 1 :]
    if following:
        if not done or done[0] != following[0]:
            errors.append(
                f"{exercise}: 'Done?' should send the reader to {following[0]} next, "
                f"but its first course link is {done[0] if done else 'missing'}"
            )
        errors += [f"{exercise}: 'Done?' points back to {p}" for p in done if p not in following]
    return errors


def walk(root: Path) -> list[str]:
    """Everything wrong with the links of the course at ``root``; empty when all is well."""
    path = course_path(root)
    errors = [f"mkdocs.yml 'Course': {p} does not exist" for p in path if not (root / p).exists()]
    for link in links(root):
        errors += check_link(root, link)
    for exercise in sorted(root.glob("solutions/*/*.ipynb")) + sorted(root.glob("exercises/*/*.ipynb")):
        errors += check_exercise(root, exercise.relative_to(root), path)
    return errors


def test_the_path_holds_every_lesson_and_exercise_in_order():
    path = course_path(ROOT)
    lessons = [p.stem for p in path if p.parts[0] == "lessons"]
    exercises = [p.parts[1] for p in path if p.parts[0] == "exercises"]
    assert lessons == sorted(p.stem for p in ROOT.glob("lessons/*.py")), "a lesson is missing or out of order"
    # Exercises keep their numbers but follow the lessons they need (exercise 01 after lesson 6):
    # their order is the one the next tests check.
    assert sorted(exercises) == sorted(p.name for p in ROOT.glob("solutions/*") if p.is_dir()), (
        "an exercise is missing or listed twice"
    )


def test_the_walker_reads_every_notebook_and_lesson():
    sources = {link.source for link in links(ROOT)}
    # every exercise notebook links to its lesson; every lesson to its exercise
    for pattern in ("solutions/*/*.ipynb", "exercises/*/*.ipynb", "lessons/*.py"):
        files = sorted(ROOT.glob(pattern))
        assert files, f"nothing matches {pattern}"
        assert {p.relative_to(ROOT) for p in files} <= sources, f"a file of {pattern} has no link"


def test_every_exercise_intro_links_the_notation_page():
    notebooks = sorted(ROOT.glob("solutions/*/*.ipynb")) + sorted(ROOT.glob("exercises/*/*.ipynb"))
    assert notebooks
    for notebook in notebooks:
        intro = markdown_cells(notebook)[0]
        found = {
            target(Link(notebook.relative_to(ROOT), "", m.group(2), m.group(3))) for m in LINK.finditer(_prose(intro))
        }
        assert Path("docs/notation.md") in found, f"{notebook.relative_to(ROOT)}: its intro does not link the notation"


def cited_lessons(root: Path, exercise: str) -> dict[str, set[str]]:
    """Lesson stem -> what in ``exercise`` (a folder name, "01-numpy-bert") cites it.

    Its tasks' ``lesson``, its tasks' hint ladders, the known mistakes of its tasks, and every
    lesson its source notebook links to outside "Done?", whose links point ahead on purpose.
    """
    from bertlab import diagnose
    from bertlab.checks import TASKS  # registers every mistake
    from bertlab.diagnose import ladders

    number = str(int(exercise[:2]))
    cited: dict[str, set[str]] = {}
    for task_id, task in TASKS.items():
        if task_id.split(".")[0] == number:
            cited.setdefault(task.lesson, set()).add(f"Task {task_id}'s lesson")
    for task_id, ladder in ladders.TASK_LADDERS.items():
        if task_id.split(".")[0] == number:
            cited.setdefault(ladder.lesson, set()).add(f"Task {task_id}'s hint")
    for mistake in diagnose.REGISTRY.values():
        if any(t.split(".")[0] == number for t in mistake.tasks):
            cited.setdefault(mistake.lesson, set()).add(f"mistake {mistake.id}")
    notebook = Path("solutions") / exercise / f"{exercise}.ipynb"
    for cell in markdown_cells(root / notebook):
        for m in LINK.finditer(_prose(re.split(r"^#+\s*Done\?", cell, flags=re.M)[0])):
            path = target(Link(notebook, "", m.group(2), m.group(3)))
            if path is not None and path.parts[0] == "lessons" and (root / path).exists():
                cited.setdefault(path.stem, set()).add("a link in its notebook")
    return cited


def lessons_ahead(root: Path) -> set[tuple[str, str, str]]:
    """(exercise, lesson, what cites it) for every lesson an exercise cites that does not come
    before it on the path of ``root``'s mkdocs.yml."""
    path = course_path(root)
    ahead = set()
    for here, step in enumerate(path):
        if step.parts[0] != "exercises":
            continue
        before = {p.stem for p in path[:here] if p.parts[0] == "lessons"}
        for lesson, citers in cited_lessons(root, step.parts[1]).items():
            ahead |= {(step.parts[1], lesson, citer) for citer in citers if lesson not in before}
    return ahead


# Mistakes shared by several tasks carry one lesson each, the one that explains them in full;
# for the first tasks that can make them it is a later lesson. The dropout mistakes cite lesson
# 3's "Dropout", yet Task 2.1 has dropout too (lesson 2 says what it does); the LayerNorm
# mistakes cite lesson 6, yet Tasks 2.1, 4.1 and 5.2 each hold a LayerNorm. Each exception is
# listed, so a new one fails, and one fixed must leave the list.
SHARED_AHEAD = {
    *(
        ("02-embeddings", "03-multi-head-attention", f"mistake dropout-{kind}")
        for kind in ("in-eval", "missing", "mask-shared", "not-scaled", "applied-twice")
    ),
    *(
        (exercise, "06-layernorm", f"mistake {mistake}")
        for exercise in ("02-embeddings", "04-attention-output", "05-feed-forward")
        for mistake in ("layernorm-eps-typed",)
    ),
    *(
        (exercise, "06-layernorm", f"mistake {mistake}")
        for exercise in ("04-attention-output", "05-feed-forward")
        for mistake in ("unbiased-variance", "layernorm-wrong-axis", "layernorm-eps-outside-sqrt")
    ),
    ("04-attention-output", "06-layernorm", "mistake pre-ln-order"),
}


def test_every_exercise_comes_after_the_lessons_it_cites():
    ahead = lessons_ahead(ROOT)
    assert ahead - SHARED_AHEAD == set(), "an exercise cites a lesson that comes after it:\n" + "\n".join(
        f"{exercise}: {citer} cites lessons/{lesson}" for exercise, lesson, citer in sorted(ahead - SHARED_AHEAD)
    )
    assert SHARED_AHEAD - ahead == set(), f"no longer ahead, leave SHARED_AHEAD: {sorted(SHARED_AHEAD - ahead)}"


def test_the_numpy_layer_needs_lessons_3_to_6():
    """Exercise 01 computes a whole layer: what it cites is what put it after lesson 6."""
    cited = cited_lessons(ROOT, "01-numpy-bert")
    for lesson in ("03-multi-head-attention", "04-add-and-norm", "05-feed-forward", "06-layernorm"):
        assert lesson in cited, f"01-numpy-bert no longer cites lessons/{lesson}: may it come earlier?"


def test_the_old_place_of_the_numpy_layer_is_reported(tmp_path):
    """Right after lesson 1, where it was, exercise 01 would come before four lessons it cites."""
    root = _copy(tmp_path)
    config = root / "mkdocs.yml"
    text = config.read_text()
    entry = re.search(r"^ +- (?:[^\n:]+: )?exercises/01-numpy-bert/01-numpy-bert\.ipynb\n", text, re.M)
    assert entry, "mkdocs.yml's Course has no entry for exercise 01"
    text = text.replace(entry.group(0), "")
    config.write_text(text.replace("- lessons/01-anatomy.py\n", "- lessons/01-anatomy.py\n" + entry.group(0)))
    ahead = {(exercise, lesson) for exercise, lesson, _ in lessons_ahead(root) - SHARED_AHEAD}
    assert ahead == {
        ("01-numpy-bert", lesson)
        for lesson in ("03-multi-head-attention", "04-add-and-norm", "05-feed-forward", "06-layernorm")
    }


PROMISE = "each exercise comes right after the lessons it needs"


def test_the_home_page_keeps_its_promise_in_the_path_order():
    home = (ROOT / "docs" / "index.md").read_text()
    assert PROMISE in " ".join(home.split()), f"docs/index.md no longer says {PROMISE!r}"
    table = home.split("## The path through the course", 1)[1].split("\n\n## ", 1)[0]
    rows = [line for line in table.splitlines() if re.match(r"^\| \d+ \|", line)]
    linked = [
        target(Link(Path("docs/index.md"), "", m.group(2), m.group(3))) for m in (LINK.search(r) for r in rows) if m
    ]
    steps = [_real(ROOT, ROOT / p) for p in linked if p is not None]
    assert len(steps) == len(rows), "a row of the path table links no lesson or exercise"
    assert steps == course_path(ROOT), "the home page's path table and mkdocs.yml's Course differ in order"


def test_every_link_lands_where_its_words_say():
    errors = walk(ROOT)
    assert not errors, "\n".join(errors)


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "course"
    root.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", root)
    for name in ("lessons", "solutions", "exercises"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns(".*", "__pycache__"))
    shutil.copytree(ROOT / "docs", root / "docs", symlinks=True, ignore=shutil.ignore_patterns("hooks"))
    return root


def _plant(notebook: Path, cell_id: str, old: str, new: str) -> None:
    nb = nbformat.read(notebook, as_version=4)
    (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == cell_id]
    assert old in cell.source, f"{notebook.name}'s {cell_id} no longer says {old!r}"
    cell.source = cell.source.replace(old, new)
    nbformat.write(nb, notebook)


@pytest.mark.parametrize(
    ("old", "new", "report"),
    [
        ("*Add & Norm*", "*The first Add & Norm*", "quotes the title 'The first Add & Norm'"),
        ("[lesson 4,", "[lesson 5,", "says lesson 5"),
        ("04-add-and-norm.py)", "05-feed-forward.py)", "should send the reader to lessons/04-add-and-norm.py"),
        ("04-add-and-norm.py)", "04-add-and-norm.py#no-such-section)", "has no heading #no-such-section"),
        ("04-add-and-norm.py)", "04-add-norm.py)", "does not exist"),
    ],
    ids=["title", "number", "next", "anchor", "missing"],
)
def test_the_walker_reports_a_planted_mistake(tmp_path, old, new, report):
    root = _copy(tmp_path)
    assert walk(root) == walk(ROOT), "the copy should read like the course"
    notebook = root / "solutions" / "03-self-attention" / "03-self-attention.ipynb"
    _plant(notebook, "outro", old, new)
    errors = walk(root)
    assert any(report in e and "03-self-attention" in e for e in errors), "\n".join(errors)


def test_the_walker_reports_a_read_first_from_the_future(tmp_path):
    root = _copy(tmp_path)
    notebook = root / "exercises" / "06-bert-model" / "06-bert-model.ipynb"
    _plant(notebook, "intro", "07-putting-it-together.py)", "08-residual-connections.py)")
    errors = walk(root)
    assert any("comes after it on the path" in e for e in errors), "\n".join(errors)
    assert any("leaves out lessons/07-putting-it-together.py" in e for e in errors), "\n".join(errors)
