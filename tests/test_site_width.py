"""Code on the built site reads without sideways scrolling on a laptop screen, and without the checks.

At 1280 x 800 in headless Chromium (``tests/site_build.py``'s ``site``, built once per run), no code block of
any page scrolls sideways: neither a lesson's code (written to 100 columns, ``lessons/ruff.toml``)
nor a printout (which keeps its columns, ``docs/assets/site.css``, and the lessons' 100 columns),
nor a sample on the guides.
Each lesson page shows its code without the ``claims`` calls that check its prose
(``docs/hooks/lesson_code.py``), and says in text, once, what a check mark means.
"""

from __future__ import annotations

import html
import re

import pytest

from tests.site_build import lessons

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("site")]

PRINTOUT = re.compile(r'class="jp-RenderedText jp-OutputArea-output"[^>]*>\s*<pre>(.*?)</pre>', re.S)
LINE = 100  # lessons/ruff.toml
CODE = re.compile(r"<pre[^>]*>(.*?)</pre>|<div class=\"clipboard-copy-txt\"[^>]*>(.*?)</div>", re.S)


def test_no_code_block_scrolls_sideways_at_1280_px(read_pages):
    """Measured in the one visit of each page (``tests/site_build.py``), at 1280 x 800 (``SCROLLING``)."""
    scrolled = [f"{url or 'home'}: {found}" for url, page in read_pages["pages"].items() for found in page["scrolled"]]
    assert len(read_pages["pages"]) >= 20, sorted(read_pages["pages"])
    assert not scrolled, f"{len(scrolled)} code blocks scroll sideways at 1280 px:\n" + "\n".join(scrolled[:40])


def test_lesson_printouts_fit_the_lessons_line_length(site):
    """A printout is read beside the code: it keeps to the lessons' 100 columns, so its table keeps
    its columns on the page (a printout does not wrap) and never scrolls."""
    wide = []
    for lesson in lessons():
        page = (site / "lessons" / lesson.stem / "index.html").read_text(encoding="utf-8")
        for found in PRINTOUT.finditer(page):
            text = html.unescape(re.sub(r"<[^>]+>", "", found.group(1)))
            wide += [f"{lesson.stem}: {len(line)}: {line[:100]}" for line in text.splitlines() if len(line) > LINE]
    assert not wide, f"{len(wide)} printout lines over {LINE} characters:\n" + "\n".join(wide[:40])


def test_lesson_pages_show_and_copy_no_claims_call(site):
    for lesson in lessons():
        page = (site / "lessons" / lesson.stem / "index.html").read_text(encoding="utf-8")
        for found in CODE.finditer(page):
            text = html.unescape(re.sub(r"<[^>]+>", "", found.group(1) or found.group(2)))
            assert "claims." not in text and "import claims" not in text, (lesson.stem, text[:300])


def test_the_check_marks_are_explained_in_text(site):
    first = next(lesson for lesson in lessons() if "{{ claim:" in lesson.read_text(encoding="utf-8"))
    for page in (site / "lessons" / first.stem / "index.html", site / "learner-guide" / "index.html"):
        text = re.sub(r"<[^>]+>", " ", page.read_text(encoding="utf-8"))
        assert re.search(r"A ✓ after a sentence[^.]*means the site checked", " ".join(text.split())), page
