"""The course site as a reader sees it: the strict build, served locally, read by headless Chromium.

The site is built once per test run, by one xdist worker (executed lessons are cached in
.cache/, so a rebuild costs seconds). Browser tests use Debian's chromium: Playwright's own
browser download is not available where the course runs. Every request that would leave 127.0.0.1
is blocked and reported: the course must work offline, so a CDN script or a web font is a failure, not a slow page.
"""

from __future__ import annotations

import functools
import html.parser
import os
import posixpath
import re
import subprocess
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
from filelock import FileLock

from tests.conftest import learner_env
from tests.docs_hooks import load_hook

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"

# One xdist worker runs them all (with `--dist loadgroup`), so the site is built once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("site")]


def lessons() -> list[Path]:
    return sorted((ROOT / "lessons").glob("[0-9][0-9]-*.py"))


def exercises() -> list[Path]:
    return sorted((ROOT / "exercises").glob("[0-9][0-9]-*/[0-9][0-9]-*.ipynb"))


def has_math(lesson: Path) -> bool:
    """True when a markdown cell (a "# " comment in a jupytext percent file) holds $...$."""
    prose = [line for line in lesson.read_text().splitlines() if line.startswith("# ")]
    return re.search(r"\$[^$]+\$", "\n".join(prose)) is not None


# -- the build and the server ----------------------------------------------------------------


def _build(out: Path) -> str | None:
    """Build the site into ``out`` the way ``make start`` does; the error output when it fails.

    ``make site`` with this process's environment (``MPLBACKEND=Agg`` included, as conftest sets
    it) but for the thread counts set for test workers only: the Makefile's variables, the strict
    build and the executed-lesson cache in .cache/ are the learner's. Only the output directory
    differs. ``-o`` keeps make from reinstalling .venv.
    """
    proc = subprocess.run(
        ["make", "--no-print-directory", "-o", ".venv/.installed", "site", f"SITE_DIR={out}"],
        cwd=ROOT,
        env=learner_env(),
        capture_output=True,
        text=True,
    )
    return None if proc.returncode == 0 else (proc.stdout + proc.stderr)[-6000:]


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    # Under pytest-xdist every worker has its own session: the first one builds, under a lock,
    # into the run's shared directory, and the others reuse that build (or its failure).
    shared = os.environ.get("PYTEST_XDIST_WORKER") is not None
    root = tmp_path_factory.getbasetemp().parent if shared else tmp_path_factory.getbasetemp()
    out, failed = root / "site", root / "site-build-failed.txt"
    with FileLock(str(root / "site.lock")):
        if not (out / "index.html").is_file() and not failed.exists():
            error = _build(out)
            if error is not None:
                failed.write_text(error)
    if failed.exists():
        pytest.fail(f"mkdocs build --strict failed:\n{failed.read_text()}")
    return out


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the test reports failed requests itself
        pass


@pytest.fixture(scope="session")
def base_url(site):
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


class Reader:
    """A browser tab on the served site that records requests that fail or leave the machine."""

    def __init__(self, context, base_url: str):
        self.base_url = base_url
        self.problems: list[str] = []
        context.route("**/*", self._route)
        self.page = context.new_page()
        self.page.on("response", self._response)

    def _response(self, r) -> None:
        if r.status >= 400:
            self.problems.append(f"HTTP {r.status}: {r.url}")

    def _route(self, route):
        url = route.request.url
        if url.startswith((self.base_url, "data:", "blob:")):
            route.continue_()
        else:
            self.problems.append(f"request leaving the machine: {url}")
            route.abort()

    def visit(self, path: str):
        self.page.goto(urljoin(self.base_url, path))
        self.page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
        self.page.evaluate("() => MathJax.startup.promise.then(() => true)")
        return self.page

    def broken_images(self) -> list[str]:
        """The src of every <img> that did not load (lazy images are made to load first)."""
        return self.page.evaluate(
            """async () => {
                const images = Array.from(document.images);
                images.forEach(i => { i.loading = "eager"; });
                await Promise.all(images.map(i => i.complete ? null :
                    new Promise(done => { i.addEventListener("load", done); i.addEventListener("error", done); })));
                return images.filter(i => !(i.naturalWidth > 0)).map(i => (i.getAttribute("src") || "").slice(0, 100));
            }"""
        )


@pytest.fixture
def reader(browser, base_url):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    yield Reader(context, base_url)
    context.close()


def lesson_url(lesson: Path) -> str:
    return f"lessons/{lesson.stem}/"


def notebook_urls() -> list[str]:
    """The lesson and exercise pages: notebooks rendered by mkdocs-jupyter."""
    return [lesson_url(lesson) for lesson in lessons()] + [
        f"exercises/{nb.parent.name}/{nb.stem}/" for nb in exercises()
    ]


# A laptop screen: every page is read at this size (test_site_width.py reads the scrolling blocks).
VIEWPORT = {"width": 1280, "height": 800}
# Every block that could scroll: a page's <pre>, its <code> (Material scrolls the <code> inside a
# <pre>), a notebook cell's highlighted code and its printouts.
SCROLLING = """() => Array.from(document.querySelectorAll(
        "article pre, article pre > code, .jupyter-wrapper .highlight-ipynb, .jp-OutputArea-output"))
    .filter(e => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1)
    .map(e => {
        const lines = (e.innerText || "").split("\\n");
        const widest = lines.reduce((a, b) => (b.length > a.length ? b : a), "");
        return `${e.tagName.toLowerCase()}.${e.className}: ${e.scrollWidth} px in ${e.clientWidth} px, ` +
               `${widest.length} characters: ${widest.slice(0, 90)}`;
    })"""

# What the page tests read of a page, read in one visit (MathJax typesets each page for a second
# or more: four tests visiting the same pages each took a minute of the run).
PAGE_READING = """() => {
    const text = e => { const c = e.cloneNode(true);
        c.querySelectorAll("mjx-container, .anchor-link, .headerlink").forEach(x => x.remove());
        return c.textContent.replace(/\\s+/g, " ").trim(); };
    const toc = Array.from(document.querySelectorAll(".md-nav--secondary a.md-nav__link[href^='#']"))
        .map(a => { const h = document.getElementById(decodeURIComponent(a.hash.slice(1)));
                    return [a.hash, text(a), h ? text(h) : null,
                            a.querySelectorAll("mjx-container").length,
                            h ? h.querySelectorAll("mjx-container").length : 0]; });
    // Prose of the markdown cells without the typeset math and code: no TeX may be left.
    const markdown = Array.from(document.querySelectorAll(".jp-RenderedMarkdown")).map(cell => {
        const copy = cell.cloneNode(true);
        copy.querySelectorAll("mjx-container, code, pre").forEach(e => e.remove());
        return copy.textContent;
    }).join("\\n");
    return {
        toc,
        markdown,
        typeset: document.querySelectorAll(".jp-RenderedMarkdown mjx-container").length,
        tex_errors: document.querySelectorAll("mjx-merror").length,
        figures: document.querySelectorAll(".jp-OutputArea img").length,
    };
}"""


@pytest.fixture(scope="session")
def read_pages(browser, base_url, site) -> dict:
    """Every page of the site visited once: ``{"pages": {url: reading}, "problems": [...]}``, each
    reading holding its visible prose, broken images, typeset math, figures and TOC entries, and
    ``problems`` the requests that failed or left the machine."""
    context = browser.new_context(viewport=VIEWPORT)
    reader = Reader(context, base_url)
    first_math = next((lesson_url(lesson) for lesson in lessons() if has_math(lesson)), None)
    readings = {}
    try:
        for url in pages(site):
            page = reader.visit(url)
            readings[url] = {
                "prose": page.evaluate(VISIBLE_PROSE),
                "broken_images": reader.broken_images(),
                **page.evaluate(PAGE_READING),
                "scrolled": page.evaluate(SCROLLING),
            }
            if url == first_math:
                ARTIFACTS.mkdir(exist_ok=True)
                page.screenshot(path=str(ARTIFACTS / "lesson.png"))
    finally:
        context.close()
    return {"pages": readings, "problems": reader.problems}


def reading(read_pages: dict, url: str) -> dict:
    assert url in read_pages["pages"], f"{url}: no such page on the site"
    return read_pages["pages"][url]


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

# Text nodes and paragraphs a reader sees as prose: code, program output and typeset math aside.
VISIBLE_PROSE = """() => {
    // .clipboard-copy-txt: the hidden copy of a code cell's source for the copy button
    const skip = "mjx-container, code, pre, kbd, samp, script, style, svg, textarea, "
        + ".jp-OutputArea, .highlight, .clipboard-copy-txt";
    const texts = [];
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
        const node = walker.currentNode;
        if (node.parentElement.closest(skip) || !node.textContent.trim()) continue;
        texts.push(node.textContent);
    }
    const paragraphs = Array.from(document.querySelectorAll("p"))
        .filter(p => !p.closest(skip)).map(p => p.textContent);
    return {texts, paragraphs};
}"""


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


def pages(site: Path) -> list[str]:
    """The URL path of every page of the built site."""
    found = [p.parent.relative_to(site).as_posix() for p in site.rglob("index.html")]
    return sorted("" if p == "." else f"{p}/" for p in found)


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
