"""The site's hooks on a small mkdocs project: what they fix, and the defects that fail the build.

Each test builds a two-page project (a home page and one executed lesson) in a temporary
directory with the course's own hooks and mkdocs-jupyter options, so a planted defect never
touches the course; a build takes seconds.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HOOKS = ROOT / "docs" / "hooks"
ALL_HOOKS = ["lessons_parallel.py", "lesson_run.py", "course.py", "toc.py", "figure_alt.py", "anchors.py"]

pytestmark = pytest.mark.slow

HOME = """\
# Home

Read [the lesson](lessons/01-demo.py), its [second section](lessons/01-demo.py#wo-adds-the-heads-up).

## Why $4H$
"""

LESSON = """\
# %% [markdown]
# # Demo lesson
#
# Back to [the home page](../index.md).
#
# ## What `intermediate.dense` is
#
# A heading with code.
#
# ## $W^O$ adds the heads up
#
# A heading with TeX.

# %% alt="A straight line from (0, 0) to (1, 1)."
import matplotlib.pyplot as plt

plt.plot([0, 1], [0, 1])
plt.show()
"""


def project(tmp_path: Path, home: str = HOME, lesson: str = LESSON, hooks=ALL_HOOKS) -> Path:
    (tmp_path / "docs" / "lessons").mkdir(parents=True)
    (tmp_path / "docs" / "index.md").write_text(home)
    (tmp_path / "docs" / "lessons" / "01-demo.py").write_text(lesson)
    hook_lines = "\n".join(f"  - {HOOKS / name}" for name in hooks)
    (tmp_path / "mkdocs.yml").write_text(
        textwrap.dedent("""\
        site_name: demo
        theme:
          name: material
          font: false
        nav:
          - Home: index.md
          - lessons/01-demo.py
        plugins:
          - mkdocs-jupyter:
              include: ["lessons/*.py"]
              execute: true
              allow_errors: false
              kernel_name: python3
              remove_tag_config:
                remove_cell_tags: [remove-cell]
        markdown_extensions:
          - toc:
              permalink: true
          - pymdownx.arithmatex:
              generic: true
        hooks:
        """)
        + hook_lines
        + "\n"
    )
    return tmp_path


def build(root: Path) -> tuple[bool, str, Path]:
    """Build ``root`` strictly, as the course's tests run it: with ``MPLBACKEND=Agg`` set."""
    env = {**os.environ, "MPLBACKEND": "Agg", "HF_HUB_OFFLINE": "1", "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc.returncode == 0, proc.stderr, root / "site"


def toc_links(page: str) -> list[tuple[str, str]]:
    """(href, inner html) of the on-page table of contents' links."""
    toc = page[page.index('data-md-component="toc"') :]
    return re.findall(
        r'<a href="(#[^"]*)" class="md-nav__link">\s*<span class="md-ellipsis">\s*(.*?)\s*</span>\s*</a>', toc, re.S
    )


def test_a_correct_project_builds_with_figures_toc_and_links(tmp_path):
    ok, log, site = build(project(tmp_path))
    assert ok, log
    # the lesson ran ahead of the pages, in a process of its own, and its page was read from the cache
    assert "executing 1 lesson(s)" in log and re.search(r"Cache hit: .*01-demo\.py", log), log
    page = (site / "lessons" / "01-demo" / "index.html").read_text()
    # the figure is drawn although MPLBACKEND=Agg, and carries the cell's description
    images = re.findall(r'<img [^>]*src="data:image/png[^>]*>', page)
    assert len(images) == 1, "the lesson's plt.show() drew no figure on the page"
    assert 'alt="A straight line from (0, 0) to (1, 1)."' in images[0]
    # the TOC shows each heading's text and links to an id the page has
    links = dict(toc_links(page))
    ids = set(re.findall(r'\bid="([^"]+)"', page))
    assert links, "no table of contents on the lesson page"
    assert all(href[1:] in ids for href in links), f"TOC links to missing ids: {sorted(set(links) - ids)}"
    titles = list(links.values())
    assert "What intermediate.dense is" in titles, titles
    assert any(r'<span class="arithmatex">\(W^O\)</span> adds the heads up' == t for t in titles), titles
    # a markdown page's TOC keeps its math typesettable (MathJax reads .arithmatex elements only)
    home = (site / "index.html").read_text()
    assert r'Why <span class="arithmatex">\(4H\)</span>' in dict(toc_links(home)).values(), toc_links(home)
    # the notebook's markdown link is rewritten to the page's URL
    assert 'href="../../">the home page</a>' in page, "the notebook's link to ../index.md is not rewritten"


def _processes_with(marker: str) -> list[str]:
    """Command lines of the processes whose environment holds ``marker``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if (
                proc.name.isdigit()
                and proc.name != str(os.getpid())
                and marker.encode() in (proc / "environ").read_bytes()
            ):
                found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return found


@pytest.mark.parametrize("path", ["linux", "portable"])
def test_lessons_run_in_kernels_that_end_with_the_build(tmp_path, monkeypatch, path):
    """On Linux the kernel is a fork of a template: it starts with torch imported (an ordinary
    kernel would not have it: the lesson never imports it). On the portable path, where forking
    after torch's imports is unsafe (macOS; emulated: no os.fork anywhere in the build), it is an
    ordinary kernel. Either way it draws its figure, and no process of the build outlives it."""
    from tests.grading_paths import path_env

    lesson = LESSON + '\n# %%\nimport sys\nprint("torch already imported:", "torch" in sys.modules)\n'
    marker = f"BERTLAB_TEST_BUILD={tmp_path}"
    for name in ("BERTLAB_PORTABLE", "PYTHONPATH"):
        monkeypatch.delenv(name, raising=False)
        if name in path_env(path):
            monkeypatch.setenv(name, path_env(path)[name])
    monkeypatch.setenv("BERTLAB_TEST_BUILD", str(tmp_path))
    ok, log, site = build(project(tmp_path, lesson=lesson))
    assert ok, log
    page = (site / "lessons" / "01-demo" / "index.html").read_text()
    assert f"torch already imported: {path == 'linux'}" in page
    assert len(re.findall(r'<img [^>]*src="data:image/png[^>]*>', page)) == 1
    assert not _processes_with(marker), _processes_with(marker)


def test_planted_missing_pages_anchors_and_descriptions_fail_the_build(tmp_path):
    home = HOME + "\nSee [a page not written](missing.md) and [a lost section](lessons/01-demo.py#no-such-id).\n"
    lesson = LESSON.replace(
        "Back to [the home page](../index.md).", "Back to [the home page](../index.md), or [nowhere](../nowhere.md)."
    )
    lesson += "\n# %%\nplt.plot([1, 0])\nplt.show()\n"
    ok, log, _ = build(project(tmp_path, home=home, lesson=lesson))
    assert not ok, "the strict build passed with a missing page, a broken anchor and an undescribed figure"
    assert "missing.md" in log, log
    assert "nowhere.md" in log, log
    assert "#no-such-id" in log, log
    assert "without a description" in log, log


def test_a_lesson_that_fails_fails_the_build_with_its_own_error(tmp_path):
    """Run ahead of the pages, the failing lesson leaves no cache entry; its page runs it again and
    the build stops with the lesson's error, as without the parallel run."""
    lesson = LESSON + '\n# %%\nraise ZeroDivisionError("the lesson\'s own error")\n'
    ok, log, _ = build(project(tmp_path, lesson=lesson))
    assert not ok, log
    log = re.sub(r"\x1b\[[0-9;]*m", "", log)  # the traceback's colours
    assert "01-demo.py did not run through here: ZeroDivisionError" in log, log
    assert "ZeroDivisionError: the lesson's own error" in log.split("did not run through here", 1)[1], log
    assert not list((tmp_path / ".cache").rglob("*.json")), "a failed lesson left a cache entry"


def test_without_the_kernel_setup_agg_draws_nothing(tmp_path):
    """The planted defect for figures: the lesson hook left out, the kernel inherits Agg."""
    hooks = [h for h in ALL_HOOKS if h != "lesson_run.py"]
    ok, log, _ = build(project(tmp_path, hooks=hooks))
    assert not ok and "draws no figure" in log, log


def _lesson_run():
    spec = importlib.util.spec_from_file_location("lesson_run", HOOKS / "lesson_run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cache_key_covers_source_environment_and_versions(tmp_path, monkeypatch):
    hook = _lesson_run()
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text("x = 1\n")
    monkeypatch.delenv("BERTLAB_MODEL", raising=False)
    key = hook.cache_key(package, "python3")
    assert hook.cache_key(package, "python3") == key, "the key is not stable"
    conditions = hook.conditions(package, "python3")
    assert any(d.startswith("matplotlib==") for d in conditions["distributions"]), conditions["distributions"][:5]
    monkeypatch.setenv("BERTLAB_MODEL", "/elsewhere")
    assert hook.cache_key(package, "python3") != key, "BERTLAB_MODEL does not change the key"
    monkeypatch.delenv("BERTLAB_MODEL")
    monkeypatch.setenv("TRANSFORMERS_VERBOSITY", "debug")
    assert hook.cache_key(package, "python3") != key, "TRANSFORMERS_VERBOSITY does not change the key"
    monkeypatch.delenv("TRANSFORMERS_VERBOSITY")
    (package / "a.py").write_text("x = 2\n")
    assert hook.cache_key(package, "python3") != key, "the package source does not change the key"
