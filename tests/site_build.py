"""The run's one site: its build, a server for it, and one reading of each page in Chromium.

The fixtures are registered once, in ``tests/conftest.py``: a test module that imported them
would define fixtures of its own, and a session fixture defined twice is computed twice (the
pages' reading, a minute of Chromium, was: once for ``test_site.py`` and once for
``test_site_width.py``). Test modules import the helpers from here and ask for the fixtures by name.

The site is built once per test run, by one xdist worker (executed lessons are cached in .cache/,
so a rebuild costs seconds); every test given it is in the ``site`` group (``conftest.py``).
Browser tests use Debian's chromium: Playwright's own browser download is not available where the
course runs. Every request that would leave 127.0.0.1 is blocked and reported: the course must
work offline, so a CDN script or a web font is a failure, not a slow page.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urljoin

import pytest
from filelock import FileLock

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"


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
    from tests.conftest import learner_env  # here: conftest imports this module's fixtures

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


def pages(site: Path) -> list[str]:
    """The URL path of every page of the built site."""
    found = [p.parent.relative_to(site).as_posix() for p in site.rglob("index.html")]
    return sorted("" if p == "." else f"{p}/" for p in found)
