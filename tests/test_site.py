"""The course site as a reader sees it: the strict build, served locally, read by headless Chromium.

The build, its server and the one reading of each page are ``tests/site_build.py``'s.
"""

from __future__ import annotations

import html.parser
import os
import posixpath
import re
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest

from tests.docs_hooks import load_hook
from tests.site_build import (
    ARTIFACTS,
    ROOT,
    Reader,
    exercises,
    has_math,
    lesson_url,
    lessons,
    notebook_urls,
    reading,
)

# One xdist worker runs them all (with `--dist loadgroup`), so the site is built once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("site")]


@pytest.fixture
def reader(browser, base_url):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    yield Reader(context, base_url)
    context.close()


# -- the tests -------------------------------------------------------------------------------


def test_nav_lists_every_lesson_and_exercise(reader):
    page = reader.visit("")
    hrefs = page.eval_on_selector_all("nav.md-nav--primary a.md-nav__link[href]", "as => as.map(a => a.href)")
    paths = {urlsplit(h).path.lstrip("/") for h in hrefs}
    missing = [lesson.name for lesson in lessons() if lesson_url(lesson) not in paths]
    missing += [
        nb.relative_to(ROOT).as_posix() for nb in exercises() if f"exercises/{nb.parent.name}/{nb.stem}/" not in paths
    ]
    assert not missing, f"not in the site's navigation (add them to mkdocs.yml's nav): {missing}"
    assert not reader.problems, reader.problems


def test_home_page_shows_the_diagram(reader, base_url):
    page = reader.visit("")
    assert page.locator('img[src$="bertlayer.svg"]').count() == 1, "the home page must show assets/bertlayer.svg"
    response = page.request.get(urljoin(base_url, "assets/bertlayer.svg"))
    assert response.ok and response.headers["content-type"].startswith("image/svg+xml")
    assert reader.broken_images() == []
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "site.png"), full_page=True)
    assert not reader.problems, reader.problems


def test_lessons_typeset_math_and_show_their_images(read_pages):
    assert lessons(), "no lessons/NN-*.py to check"
    with_math = [lesson for lesson in lessons() if has_math(lesson)]
    assert with_math, "no lesson has $...$ math: the MathJax check would prove nothing"
    for lesson in lessons():
        page = reading(read_pages, lesson_url(lesson))
        assert page["broken_images"] == [], f"{lesson.name}: images that did not load"
        if lesson not in with_math:
            continue
        assert page["typeset"] > 0, f"{lesson.name}: no typeset math"
        assert page["tex_errors"] == 0, f"{lesson.name}: MathJax reports a TeX error"
        raw = re.findall(r"\$[^$]*\$?|\\(?:frac|sqrt|mathrm|text|top|[a-zA-Z]+\{)", page["markdown"])
        assert not raw, f"{lesson.name}: raw TeX visible on the page: {raw[:5]}"
    assert not read_pages["problems"], read_pages["problems"]


def test_search_finds_a_lesson(reader):
    assert lessons(), "no lessons/NN-*.py to search"
    page = reader.visit("")
    page.locator("input.md-search__input").click()
    page.keyboard.type("intermediate")  # Material searches on key events, not on fill()
    results = page.locator(".md-search-result__item a")
    results.first.wait_for(timeout=15_000)
    hrefs = results.evaluate_all("as => as.map(a => a.href)")
    assert any("/lessons/" in h for h in hrefs), f"searching 'intermediate' lists no lesson: {hrefs}"
    assert not reader.problems, reader.problems


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("href", "src") and value and tag in ("a", "img", "script", "link"):
                self.links.append(value)


def test_internal_links_resolve(site):
    """Every relative href/src of every page points at a file of the site (lesson links included)."""
    broken = []
    for page in sorted(site.rglob("*.html")):
        if page.name == "404.html":
            continue  # its links are written for any depth
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8"))
        here = page.parent.relative_to(site).as_posix()
        for link in parser.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or not parts.path or link.startswith("/"):
                continue
            target = site / posixpath.normpath(posixpath.join(here, parts.path))
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{page.relative_to(site)}: {link}")
    assert not broken, "broken links:\n" + "\n".join(broken[:30])


# -- what the build puts on every page ----------------------------------------------------------

NBCONVERT_DEFAULT_ALT = "No description has been provided for this image"
# Text a reader must never see: inline TeX left untypeset, TeX commands, reST roles.
RAW_TEX = re.compile(
    r"\$[^$\s][^$]*\$|\\[()\[\]]|\\(?:frac|sqrt|mathrm|mathbf|mathcal|text|top|partial|cdot|sum|left|right)\b"
)
REST_ROLE = re.compile(r":(?:func|class|data|meth|attr|mod|obj|exc|ref|py:\w+):`?")
# A list item swallowed into the paragraph above it: "N. " starts a line inside a <p>.
SWALLOWED_ITEM = re.compile(r"\n[ \t]*\d+\.[ \t]")


def prose_problems(texts: list[str], paragraphs: list[str]) -> list[str]:
    """Raw TeX, reST roles, '::' literal-block markers and swallowed list items in a page's prose."""
    problems = [f"raw TeX {m!r}" for t in texts for m in RAW_TEX.findall(t)]
    problems += [f"reST role {m!r}" for t in texts for m in REST_ROLE.findall(t)]
    problems += [f"paragraph ending in '::': {p.strip()[-60:]!r}" for p in paragraphs if p.strip().endswith("::")]
    problems += [f"list item inside a paragraph: {p.strip()[:80]!r}" for p in paragraphs if SWALLOWED_ITEM.search(p)]
    return problems


def test_prose_checks_catch_planted_defects():
    assert prose_problems(["What $W^O$ does", r"see \frac{a}{b}"], []) == ["raw TeX '$W^O$'", r"raw TeX '\\frac'"]
    assert prose_problems(["use :func:", "locate"], ["Like this::"]) == [
        "reST role ':func:'",
        "paragraph ending in '::': 'Like this::'",
    ]
    assert prose_problems([], ["4. Grade it (or make grade).\n5. Read the feedback"]) != []
    assert prose_problems(["costs 5 dollars", "Task 1.5"], ["One line.\nAnother, 2019.", "1. a"]) == []


def test_no_page_shows_raw_tex_rest_roles_or_swallowed_list_items(read_pages):
    urls = list(read_pages["pages"])
    assert len(urls) > 10, f"too few pages to check: {urls}"
    problems = []
    for url in urls:
        prose = reading(read_pages, url)["prose"]
        assert prose["texts"], f"{url or 'home'}: no text found"
        problems += [f"{url or 'home'}: {p}" for p in prose_problems(prose["texts"], prose["paragraphs"])]
    assert not problems, "\n".join(problems[:40])
    assert not read_pages["problems"], read_pages["problems"]


def drawn_figures(lesson: Path) -> int:
    """How many figures the lesson draws: its plt.show() calls (markdown lines start with "# ")."""
    return sum(1 for line in lesson.read_text().splitlines() if re.match(r"\s*plt\.show\(\)", line))


def test_each_lesson_page_shows_every_figure_it_draws(read_pages):
    """Under MPLBACKEND=Agg (set for the tests) plt.show() would draw nothing: the build must not care."""
    assert os.environ.get("MPLBACKEND") == "Agg", "the test must run where figures are most easily lost"
    drawn = {lesson: drawn_figures(lesson) for lesson in lessons()}
    assert sum(drawn.values()) > 0, "no lesson draws a figure: the check would prove nothing"
    wrong = []
    for lesson, count in drawn.items():
        page = reading(read_pages, lesson_url(lesson))
        if page["figures"] != count:
            wrong.append(f"{lesson.name}: draws {count}, the page shows {page['figures']}")
        assert page["broken_images"] == [], f"{lesson.name}: images that did not load"
    assert not wrong, wrong
    assert not read_pages["problems"], read_pages["problems"]


class _Images(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.alts: list[str | None] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.alts.append(dict(attrs).get("alt"))


def test_every_image_has_a_description(site):
    undescribed, total = [], 0
    for page in sorted(site.rglob("*.html")):
        parser = _Images()
        parser.feed(page.read_text(encoding="utf-8"))
        total += len(parser.alts)
        undescribed += [
            f"{page.relative_to(site)}: alt={alt!r}"
            for alt in parser.alts
            if not (alt or "").strip() or alt.strip() == NBCONVERT_DEFAULT_ALT
        ]
    assert total, "no image on the site: the check would prove nothing"
    assert not undescribed, "images without a description:\n" + "\n".join(undescribed)


def test_every_fragment_link_points_at_an_id(site):
    """Body links, navigation and tables of contents: every #fragment exists on its target page."""
    anchors = load_hook("anchors")
    links = sum(len(anchors.read(p).links) for p in site.rglob("*.html"))
    assert links > 100, f"only {links} fragment links found: the parser misses them"
    assert anchors.broken_anchors(site) == []


def test_notebook_tables_of_contents_show_their_headings(read_pages):
    """Each TOC entry of a lesson or exercise page reads as the heading it links to."""
    wrong, entries = [], 0
    for url in notebook_urls():
        pairs = reading(read_pages, url)["toc"]
        entries += len(pairs)
        wrong += [
            f"{url}{href}: TOC {toc!r}, heading {heading!r}"
            for href, toc, heading, toc_math, heading_math in pairs
            if heading is None or toc != heading or toc_math != heading_math
        ]
    assert entries, "no TOC entry on any notebook page"
    assert not wrong, "\n".join(wrong[:30])
