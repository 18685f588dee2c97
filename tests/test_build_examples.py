"""Example output on the pages is what the code prints today (``docs/hooks/examples.py``).

A page writes ``<!-- example: NAME -->`` where it shows what a command prints; the build fills
it by running the code. Two kinds of test:

- over the sources (fast): no page types a sample of the shapes the course prints (a feedback
  line, a check count, the grade table, a usage line, the JSON report), and every placeholder
  names a sample the hook makes;
- over the built site (slow): each placeholder's block on the built page is, character for
  character, what the code prints when it runs again now, without the build's cache.
"""

from __future__ import annotations

import argparse
import html
import re
from pathlib import Path

import pytest

from tests.conftest import learner_env
from tests.docs_hooks import load_hook

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


examples = load_hook("examples")

# What the course prints, by shape: a page that shows one of these typed it by hand.
TYPED = {
    "a check's feedback line": re.compile(r"^\s*\[Task \d+\.\d+\] \S+"),
    "a check count": re.compile(r"\(\d+/\d+ checks\)"),
    "the grade table's header": re.compile(r"^notebook\s+score\s+status\b", re.M),
    "the grade table's total": re.compile(r"^total\s+\d+(\.\d+)?/\d+", re.M),
    "a grade cell's points line": re.compile(r"^\S+ / test-[\w-]+ \(\d+(\.\d+)?/\d+(\.\d+)? points?\):", re.M),
    "a usage line": re.compile(r"^(usage: )?bertlab [a-z]+ \[", re.M),
    "the JSON report": re.compile(r'^\s*"max_score":', re.M),
    "a limit's message": re.compile(r"timed out after \d+ s"),
}


def code_blocks(markdown: str) -> list[str]:
    """The text of each fenced block of ``markdown`` (indented fences too), and each inline code span."""
    blocks = re.findall(r"^ *(`{3,})[^\n]*\n(.*?)^ *\1 *$", markdown, re.M | re.S)
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"^ *`{3,}.*?^ *`{3,} *$", "", markdown, flags=re.M | re.S))
    return [text for _, text in blocks] + spans


def typed_samples(markdown: str) -> list[str]:
    """What in ``markdown`` looks like output of the course typed by hand: the shape's name and the text."""
    found = []
    for text in [*code_blocks(markdown), markdown]:
        for shape, pattern in TYPED.items():
            match = pattern.search(text)
            if match:
                found.append(f"{shape}: {match.group(0).strip()!r}")
    return sorted(set(found))


def pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def released() -> list[Path]:
    """The released notebooks, ``exercises/NN-name/NN-name.ipynb``."""
    return [p for p in sorted((ROOT / "exercises").glob("[0-9][0-9]-*/*.ipynb")) if p.stem == p.parent.name]


def test_typed_sample_shapes_are_recognised():
    """Each shape is found in a sample of it, and not in prose that only talks about it."""
    planted = {
        "a check's feedback line": "```text\n[Task 3.2] BertSelfAttention: values differ\n```\n",
        "a check count": "prints `[Task 3.2] BertSelfAttention passed (9/9 checks)`\n",
        "the grade table's header": "```text\nnotebook           score  status  first message\n```\n",
        "the grade table's total": "```text\ntotal              4/8\n```\n",
        "a grade cell's points line": "```text\n03-self-attention / test-3-2-values (0/2 points):\n```\n",
        "a usage line": "```text\nbertlab grade [EXERCISE ...] [--path DIR]\n```\n",
        "the JSON report": '```json\n{\n  "max_score": 8.0\n}\n```\n',
        "a limit's message": '("timed out after 300 s (cell 9 was running)")\n',
    }
    assert set(planted) == set(TYPED)
    for shape, markdown in planted.items():
        assert any(found.startswith(shape + ":") for found in typed_samples(markdown)), shape
    prose = "A task's checks stop at the first failure; `bertlab grade 03` prints a table with a total.\n"
    assert typed_samples(prose) == []


def test_no_page_types_a_sample_of_what_the_code_prints():
    checked = pages()
    assert len(checked) >= 6, "the docs pages were not found"
    found = [f"{page.name}: {sample}" for page in checked for sample in typed_samples(page.read_text())]
    assert not found, "typed by hand, not produced at build (write <!-- example: NAME --> instead):\n" + "\n".join(
        found
    )


# Every sample the pages show comes from here; a page may use any of them.
EXPECTED_ON = {
    "learner-guide.md": {"feedback", "grade-table"},
    "commands.md": {"grade-json", "usage grade", "usage judges", "usage doctor", "usage release", "usage autograde"},
    "instructor-guide.md": {"grade-cells 03-self-attention"},
}


def placeholders(page: Path) -> list[str]:
    return [m[2] for m in examples.PLACEHOLDER.finditer(page.read_text())]


def test_the_pages_show_their_samples_through_placeholders():
    shown = {page.name: set(placeholders(page)) for page in pages()}
    for name, expected in EXPECTED_ON.items():
        assert expected <= shown[name], f"{name} no longer shows {expected - shown[name]} from the code"


def test_a_placeholder_is_filled_as_a_block_and_an_unknown_one_fails():
    from mkdocs.exceptions import PluginError

    markdown = "Before:\n\n<!-- example: feedback -->\n\n1. step\n\n    <!-- example: usage grade -->\n"
    filled = examples.fill(markdown, {"feedback": "[Task 1.1] x\n  y", "usage grade": "usage: bertlab grade"})
    assert "```text\n[Task 1.1] x\n  y\n```" in filled
    assert "    ```text\n    usage: bertlab grade\n    ```" in filled  # inside a list item, indented like it
    with pytest.raises(PluginError, match="no example output named 'feedback'"):
        examples.fill(markdown, {})


def test_a_sample_fits_the_page_as_a_terminal_of_its_width_shows_it():
    """A line over ``COLUMNS`` breaks at spaces, its continuation indented; a rule is cut."""
    long = "  max abs diff " + "word " * 40 + "`heads-split-wrong`."
    rule = "-" * 113
    folded = examples.folded(f"[Task 3.2] short\n{long}\n{rule}").splitlines()
    assert folded[0] == "[Task 3.2] short" and folded[-1] == "-" * examples.COLUMNS
    assert all(len(line) <= examples.COLUMNS for line in folded)
    assert all(line.startswith("    ") for line in folded[2:-1]) and "`heads-split-wrong`." in folded[-2]
    assert " ".join(" ".join(folded[1:-1]).split()) == " ".join(long.split())


def test_every_placeholder_names_a_sample_the_hook_makes():
    """Without running the grader: the names the hook makes from the CLI and the release."""
    cli = pytest.importorskip("bertlab.cli")
    commands = next(a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    made = set(examples.GRADED) | {f"usage {name}" for name in commands}
    made |= {f"grade-cells {p.parent.name}" for p in released()}
    used = {name for page in pages() for name in placeholders(page)}
    assert used, "no page shows example output: this test checks nothing"
    assert used <= made, f"placeholders no sample is made for: {used - made}"


def test_a_copy_without_solutions_shows_a_note_and_still_builds(tmp_path, monkeypatch):
    """Learners may get the course without solutions/: the graded samples say why they are absent."""
    release = tmp_path / "exercises" / "03-self-attention"
    release.mkdir(parents=True)
    source = ROOT / "exercises" / "03-self-attention" / "03-self-attention.ipynb"
    (release / source.name).write_bytes(source.read_bytes())
    monkeypatch.setattr(examples, "_samples", None)
    made = examples.samples(tmp_path)
    assert {name: made[name] for name in examples.GRADED} == dict.fromkeys(examples.GRADED, examples.MISSING)
    assert made["grade-cells 03-self-attention"].startswith('check("3.1"')
    monkeypatch.setattr(examples, "_samples", None)


# -- the built site ----------------------------------------------------------------------------


def shown_blocks(page_html: str) -> list[str]:
    """The text of each code block of a built page, as a reader reads it."""
    blocks = re.findall(r"<pre[^>]*>(?:<span></span>)?<code[^>]*>(.*?)</code></pre>", page_html, re.S)
    return [html.unescape(re.sub(r"<[^>]+>", "", block)).rstrip("\n") for block in blocks]


def built(root: Path, page: str) -> str:
    return (root / page.removesuffix(".md") / "index.html").read_text()


@pytest.fixture(scope="module")
def fresh() -> dict[str, str]:
    """What the code prints now: the samples made again in a new process, not from the build's cache."""
    cells = {f"grade-cells {p.parent.name}": examples.grade_cells(ROOT, p.parent.name) for p in released()}
    # In the environment the site is built in: without the thread settings of test workers.
    env = learner_env()
    return {**examples.run_collect(ROOT, env), **cells}


def test_built_pages_show_what_the_code_prints_now(site, fresh):
    checked = 0
    for page in pages():
        names = placeholders(page)
        if not names:
            continue
        shown = shown_blocks(built(site, page.name))
        for name in names:
            expected = fresh[name].rstrip("\n")
            assert expected in shown, f"{page.name} does not show what `{name}` prints today:\n{expected}"
            checked += 1
        page_html = built(site, page.name)
        assert "<!-- example:" not in page_html, f"{page.name}: a placeholder was left unfilled"
    assert checked >= sum(map(len, EXPECTED_ON.values())), checked


@pytest.mark.slow  # grades a notebook
def test_the_feedback_sample_is_a_real_failure_of_the_graded_mistake(fresh):
    """The sample is a failure the grader made of the planted mistake, named as that mistake."""
    assert fresh["feedback"].startswith("[Task 3.2] BertSelfAttention:"), fresh["feedback"]
    assert "heads-split-wrong" in fresh["feedback"]
    assert fresh["feedback"] in fresh["grade-table"]
    assert '"mistake": "heads-split-wrong"' in fresh["grade-json"]
