"""Every known mistake's hint points at a lesson section that exists."""

import re

import pytest

from bertlab import diagnose
from bertlab.checks import TASKS  # noqa: F401  (registers every mistake)
from tests.conftest import ROOT


def headings(lesson: str) -> set[str]:
    text = (ROOT / "lessons" / f"{lesson}.py").read_text()
    return {m.group(1).strip() for m in re.finditer(r"^# #{2,3} (.+)$", text, re.MULTILINE)}


@pytest.mark.parametrize("mistake", list(diagnose.REGISTRY.values()), ids=list(diagnose.REGISTRY))
def test_hint_links_an_existing_section(mistake):
    assert (ROOT / "lessons" / f"{mistake.lesson}.py").is_file(), f"no lesson {mistake.lesson}"
    assert mistake.section in headings(mistake.lesson), f"lessons/{mistake.lesson} has no section {mistake.section!r}"
