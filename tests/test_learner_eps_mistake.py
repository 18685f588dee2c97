"""Task 2.1's eps mistake, as a learner meets it: a notebook whose embeddings' LayerNorm takes
torch's default eps (1e-05, typed in or left out) instead of ``config.layer_norm_eps``, graded
again and again with ``bertlab grade``. Each grade names the mistake, and each of the three hint
steps it shows speaks of eps, its step 2 sending the learner to a lesson section that does too
(not to "Defaults: positions and token types", which says nothing of it)."""

from __future__ import annotations

import re
import shutil

import nbformat
import pytest

from bertlab import cli
from tests.conftest import ROOT
from tests.submissions import EMBEDDINGS, replace, right

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

RIGHT_LAYERNORM = "nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)"
STEP = re.compile(r"^Hint (\d) of 3 for Task 2\.1.*?:\n((?:  .*\n?)+)", re.M)


def section_text(lesson: str, heading: str) -> str:
    """The text of ``heading``'s section in ``lessons/<lesson>.py``, up to the next heading."""
    source = (ROOT / "lessons" / f"{lesson}.py").read_text(encoding="utf-8")
    start = source.index(f"# ## {heading}\n")
    end = source.find("\n# ## ", start + 1)
    return source[start : end if end > 0 else None]


@pytest.mark.parametrize(
    "layernorm",
    ["nn.LayerNorm(config.hidden_size, eps=1e-5)", "nn.LayerNorm(config.hidden_size)"],
    ids=["typed", "left-out"],
)
def test_each_grade_names_the_eps_and_each_hint_step_speaks_of_it(layernorm, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BERTLAB_CACHE_DIR", str(tmp_path / "cache"))
    course = tmp_path / "course"
    (course / "exercises" / EMBEDDINGS).mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    notebook = replace(right(EMBEDDINGS), "bert-embeddings", RIGHT_LAYERNORM, layernorm)
    nbformat.write(notebook, course / "exercises" / EMBEDDINGS / f"{EMBEDDINGS}.ipynb")
    monkeypatch.chdir(course)

    steps: dict[int, str] = {}
    for grade in (1, 2, 3):
        cli.main(["grade"])
        shown = capsys.readouterr().out
        assert "`self.LayerNorm` has eps=1e-05, expected config.layer_norm_eps = 1e-12" in shown, shown
        assert "known mistake `embeddings-layernorm-eps-default`" in shown, shown
        found = STEP.findall(shown)
        assert [int(n) for n, _ in found] == [grade], shown  # one step a grade, the next each time
        steps[grade] = " ".join(found[0][1].split())

    for n, step in steps.items():
        assert "eps" in step or "Read lesson" in step, (n, step)
        assert "positions and token types" not in step, (n, step)
    lesson, heading = re.search(r'Read lesson (\d+), section "([^"]+)"', steps[2]).groups()
    assert heading != "Defaults: positions and token types", steps[2]
    text = section_text(f"{int(lesson):02d}-embeddings", heading)
    assert "eps" in text or "varepsilon" in text, f"section {heading!r} says nothing of eps"
