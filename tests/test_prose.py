"""Prose printed around a measured list agrees with it in number (``experiments.prose``)."""

from __future__ import annotations

import re

import pytest

from bertlab.experiments.prose import counted
from tests.conftest import ROOT


@pytest.mark.parametrize(
    "items, said",
    [([], "no layer"), ([5], "layer 5"), ([3, 5], "layers 3 and 5"), ([1, 3, 5], "layers 1, 3 and 5")],
)
def test_a_list_is_named_in_its_number(items, said):
    assert counted(items, "layer") == said


def test_no_lesson_prints_a_plural_noun_before_a_raw_list():
    """`in layers {list}` reads as plural whatever the list holds: lessons print it with `counted`."""
    raw = re.compile(r"\b(layers|heads|tokens|units) \{[^}]*(tolist\(\)|\])\}")
    found = [
        f"{path.name}:{number}"
        for path in sorted((ROOT / "lessons").glob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if raw.search(line)
    ]
    assert not found, f"a plural noun before a printed list: {found}"


# Two papers of He et al. 2016 and two of Liu et al. 2020 are cited: each citation says which.
TWO_OF_A_YEAR = re.compile(
    r"\b(?:Liu et al\.|Liu, L\.|He et al\.|He, Zhang|He, K\.)[^()\n]{0,60}\(?\b(?:2016|2020)\b(?![ab])"
)


def cited_files() -> list:
    return [
        *sorted((ROOT / "lessons").glob("[0-9][0-9]-*.py")),
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "solutions").glob("*/*.ipynb")),
    ]


def test_citations_of_two_papers_of_one_year_say_which():
    found = [
        f"{path.name}:{number}: {line.strip()}"
        for path in cited_files()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if TWO_OF_A_YEAR.search(line)
    ]
    assert not found, "He et al. 2016a/2016b, Liu et al. 2020a/2020b:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "line, caught",
    [
        ('He et al. (2016, "Identity Mappings in Deep Residual Networks", ECCV)', True),
        ('Liu et al. (2020, "Understanding the Difficulty of Training Transformers")', True),
        ("(He, Zhang, Ren & Sun 2016, ", True),
        ('He et al. (2016b, "Identity Mappings', False),
        ("Liu, L., Liu, X., Gao, J., Chen, W., & Han, J. (2020b).", False),
        ("Xiong et al. (2020, ", False),
        ("Xiong, R., Yang, Y., He, D., et al. (2020).", False),
    ],
)
def test_a_citation_without_its_letter_is_caught(line: str, caught: bool):
    assert bool(TWO_OF_A_YEAR.search(line)) is caught


EXERCISE_TITLE = re.compile(r"^# Exercise (\d\d): \S")


def test_each_exercise_is_titled_exercise_and_its_number():
    """Exercises are "Exercise 02" on the home page, in the lessons and in their own titles; "Task"
    names one task inside them (Task 2.1)."""
    import json

    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        first = "".join(json.loads(path.read_text())["cells"][0]["source"]).splitlines()[0]
        found = EXERCISE_TITLE.match(first)
        assert found and found.group(1) == path.name[:2], f"{path.name}: {first!r}"


def test_every_step_of_the_home_pages_path_says_its_question():
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in (ROOT / "docs" / "index.md").read_text().splitlines()
        if re.match(r"\|\s*\d+\s*\|", line)
    ]
    assert len(rows) >= 16, "the path table was not found"
    empty = [row[1] for row in rows if not row[2]]
    assert not empty, f"steps with no question: {empty}"
