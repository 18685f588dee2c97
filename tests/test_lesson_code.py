"""A lesson's code as its page shows it: the experiment alone, still runnable (docs/hooks/lesson_code.py).

Read from the lessons themselves, without a build: every code cell, with its ``claims`` calls
taken out as the hook takes them out, still compiles and names no ``claims``. The built pages are
checked in tests/test_site_width.py.
"""

from __future__ import annotations

import ast
import textwrap

import jupytext
import pytest
from mkdocs.exceptions import PluginError

from tests.conftest import ROOT
from tests.docs_hooks import load_hook

LESSONS = sorted((ROOT / "lessons").glob("[0-9][0-9]-*.py"))


@pytest.fixture(scope="module")
def hook():
    return load_hook("lesson_code")


@pytest.mark.parametrize("lesson", LESSONS, ids=[p.stem for p in LESSONS])
def test_each_cell_without_its_checks_compiles_and_names_no_claims(hook, lesson):
    cells = [c for c in jupytext.read(lesson).cells if c.cell_type == "code"]
    recorded = 0
    for number, cell in enumerate(cells, start=1):
        shown = hook.strip(cell.source)
        recorded += shown != cell.source
        tree = ast.parse(shown)  # raises when a block was left empty
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        assert "claims" not in names, f"{lesson.stem}, code cell {number}: still uses claims"
    assert recorded, f"{lesson.stem}: no cell records a number: is the hook still needed?"


def test_what_is_taken_out_and_what_stays(hook):
    source = textwrap.dedent(
        """\
        from bertlab.experiments import claims, lesions
        x = lesions.run()
        print(x)
        # the number the prose quotes
        claims.value("x", x, "{:.2f}")
        for i in range(3):
            _ = claims.claim(f"x{i}", x, ">", i,
                             "x is positive")
        y = claims_like = 2"""
    )
    assert (
        hook.strip(source)
        == "from bertlab.experiments import lesions\nx = lesions.run()\nprint(x)\ny = claims_like = 2"
    )


def test_an_import_of_claims_with_other_names_keeps_the_others(hook):
    source = "import torch\nfrom bertlab.experiments import claims, products\nprint(products)"
    assert hook.strip(source) == "import torch\nfrom bertlab.experiments import products\nprint(products)"


def test_a_cell_that_uses_a_recorded_value_fails_the_page(hook):
    page = (
        '<div class="highlight-ipynb hl-python"><pre>x</pre></div>\n'
        '<div class="clipboard-copy-txt" id="cell-1">y = claims.value("y", 1)\n'
        "claims.publish()\nprint(claims)</div>"
    )
    with pytest.raises(PluginError, match="still uses `claims`"):
        hook.hide_checks(page, "lessons/x.py")
    only_checks = page.replace("\nprint(claims)", "").replace("y = claims", "_ = claims")
    assert "bertlab-checks-only" in hook.hide_checks(only_checks, "lessons/x.py")
