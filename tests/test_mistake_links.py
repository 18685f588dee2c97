"""Every known mistake's hint points at a lesson section that exists."""

import re

import pytest

from bertlab import diagnose
from bertlab.checks import TASKS  # noqa: F401  (registers every mistake)
from bertlab.diagnose import ladders
from tests.conftest import ROOT


def headings(lesson: str) -> set[str]:
    text = (ROOT / "lessons" / f"{lesson}.py").read_text()
    return {m.group(1).strip() for m in re.finditer(r"^# #{2,3} (.+)$", text, re.MULTILINE)}


@pytest.mark.parametrize("mistake", list(diagnose.REGISTRY.values()), ids=list(diagnose.REGISTRY))
def test_hint_links_an_existing_section(mistake):
    assert (ROOT / "lessons" / f"{mistake.lesson}.py").is_file(), f"no lesson {mistake.lesson}"
    assert mistake.section in headings(mistake.lesson), f"lessons/{mistake.lesson} has no section {mistake.section!r}"


def section_text(lesson: str, section: str) -> str:
    """The prose of the lesson's section ``section``: its markdown cells up to the next heading
    (the code's names, `emb.dropout` say, are not what the section explains)."""
    text = (ROOT / "lessons" / f"{lesson}.py").read_text()
    start = re.search(rf"^# #{{2,3}} {re.escape(section)}$", text, re.MULTILINE)
    assert start, f"lessons/{lesson} has no section {section!r}"
    end = re.compile(r"^# #{2,3} ", re.MULTILINE).search(text, start.end())
    cells = re.split(r"^# %%", text[start.end() : end.start() if end else len(text)], flags=re.MULTILINE)
    return "\n".join(cells[:1] + [c for c in cells[1:] if c.lstrip().startswith("[markdown]")])


# What a section must speak of when a mistake's id names it: a word of the id, and the words
# (regexes, case-insensitive) that show the section is about it. A hint that cites a section
# about something else sends the learner away from their mistake.
SUBJECTS = {
    "eps": r"\\varepsilon|\beps\b|epsilon",
    "dropout": r"dropout",
    "layernorm": r"layernorm|\\mathrm\{LN\}",
    "pre-ln": r"pre-ln",
    "position": r"position",
    "token-types": r"token.type|segment",
    "mask": r"mask",
    "scaling": r"scal|\\sqrt",
    "softmax": r"softmax",
    "gelu": r"gelu",
    "relu": r"relu|\bgelu\b",
    "padding": r"padding|real(\s|#)+tokens",
    "variance": r"varian",
    "cosine": r"cosine",
}


def subjects_of(mistake_id: str) -> list[str]:
    return [word for word in SUBJECTS if re.search(rf"(^|-){re.escape(word)}(-|$)", mistake_id)]


@pytest.mark.parametrize("mistake", list(diagnose.REGISTRY.values()), ids=list(diagnose.REGISTRY))
def test_hint_section_speaks_of_the_mistake(mistake):
    text = section_text(mistake.lesson, mistake.section)
    missing = [w for w in subjects_of(mistake.id) if not re.search(SUBJECTS[w], text, re.IGNORECASE)]
    assert not missing, f'lessons/{mistake.lesson}, section "{mistake.section}", never speaks of {missing}'


# A task's own ladder answers every failure of it that names no mistake: its section must speak
# of what such failures are most often about (Task 2.1's LayerNorm eps, say).
TASK_SUBJECTS = {"2.1": ["eps", "layernorm"], "4.1": ["eps", "layernorm", "dropout"]}


@pytest.mark.parametrize("task", sorted(TASK_SUBJECTS))
def test_task_ladder_section_speaks_of_its_usual_failures(task):
    ladder = ladders.TASK_LADDERS[task]
    text = section_text(ladder.lesson, ladder.section)
    missing = [w for w in TASK_SUBJECTS[task] if not re.search(SUBJECTS[w], text, re.IGNORECASE)]
    assert not missing, f'lessons/{ladder.lesson}, section "{ladder.section}", never speaks of {missing}'
