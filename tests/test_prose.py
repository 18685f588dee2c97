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
