"""Shared fixtures: the course root, notebooks run in-process, a tiny random BERT on disk."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from bertlab.grading.pool import share_cores, spin_briefly

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# The course's own runs are strict: a lesson claim that does not hold fails the lesson and the
# build (a learner's build marks the sentence instead: docs/hooks/claims.py).
os.environ.setdefault("BERTLAB_CLAIMS", "strict")
# Tests judge in their own process, as a judge worker does: with the worker's OpenMP setting, and
# the test workers of `pytest -n N` sharing the cores as N judge workers do.
spin_briefly(os.environ)
_before = set(os.environ)
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    share_cores(os.environ, int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
# What only the test workers need: the site is built in the learner's environment, without it.
SHARED_CORES_ENV = set(os.environ) - _before


def learner_env() -> dict[str, str]:
    """This process's environment without what only the test workers need: what ``make site``
    and ``make start`` run in."""
    return {k: v for k, v in os.environ.items() if k not in SHARED_CORES_ENV}


ROOT = Path(__file__).resolve().parents[1]
# Warm judges a developer started (`make start`) are never used by the tests: only those a test
# starts itself, in a folder of its own.
os.environ["BERTLAB_JUDGES_DIR"] = tempfile.mkdtemp(prefix="bertlab-judges-")
# Nor is the developer's record of grading times (it only orders the notebooks).
os.environ["BERTLAB_CACHE_DIR"] = tempfile.mkdtemp(prefix="bertlab-cache-")
# Each pytest process (each xdist worker too) made its own two: they go with it.
for _made in (os.environ["BERTLAB_JUDGES_DIR"], os.environ["BERTLAB_CACHE_DIR"]):
    atexit.register(shutil.rmtree, _made, ignore_errors=True)


def solution_notebook(name: str) -> Path:
    return ROOT / "solutions" / name / f"{name}.ipynb"


def solution_namespace(*notebooks: str) -> dict:
    """Run the code cells of ``notebooks`` (grade cells and plots aside), in order, in one new namespace.

    The classes and functions defined there are learner-style right code: written in the
    notebooks, not transformers' own (which the checks refuse as a shortcut).
    """
    import nbformat

    namespace: dict = {}
    for name in notebooks:
        for cell in nbformat.read(solution_notebook(name), as_version=4).cells:
            meta = cell.metadata.get("nbgrader", {})
            # every code cell but the grade cells, the plots and what reads the plots' results
            # (notebook 07's guesses revealed): setup, given code, solutions
            skipped = meta.get("grade") or meta.get("grade_id") in ("plot", "predictions")
            if cell.cell_type == "code" and not skipped:
                exec(compile(cell.source, f"<cell {name}:{meta.get('grade_id', 'given')}>", "exec"), namespace)
    return namespace


@pytest.fixture(scope="session")
def model():
    """The pretrained reference BertModel (eval mode, frozen)."""
    from bertlab import reference

    return reference.load_model()


@pytest.fixture(scope="session")
def tokenizer():
    """The pretrained model's tokenizer."""
    from bertlab import reference

    return reference.load_tokenizer()


@pytest.fixture(scope="session")
def batch(tokenizer):
    """The course corpus, tokenized and padded: (B, T) tensors."""
    from bertlab import corpus

    return corpus.batch(tokenizer)


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A randomly initialised 2-layer BERT (hidden 32, 4 heads) saved with the bundled tokenizer."""
    import torch
    from transformers import BertConfig, BertModel

    from bertlab import reference

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-bert")
    config = BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=128
    )
    BertModel(config).save_pretrained(path)
    reference.load_tokenizer(None).save_pretrained(path)
    return path


def pytest_terminal_summary(terminalreporter):
    from tests.mutations import all_mutations

    mutations = all_mutations()
    terminalreporter.write_line(
        f"mutation test: {len(mutations)} known mistakes injected into solution notebooks "
        f"({len({m.mistake for m in mutations})} distinct)"
    )
    from tests.submissions import CASES

    terminalreporter.write_line(f"bad submissions: {len(CASES)} cases, each with its expected verdict")


CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


# Here, not in a test module: one Playwright per worker. A second one (a module importing the
# fixture defines its own) fails to start inside the first one's event loop.
@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.exists():
        message = f"Debian's chromium is not installed ({CHROMIUM}); `make browser` installs it"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI must run the browser tests)")
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


SLOW_FIXTURES = {"site", "browser", "jupyterlab", "graded"}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(session, items):
    """A module that defines a fixture of its own (module- or session-wide) runs on one worker.

    Spread over two workers, each would build the fixture (a graded class, a grading run: minutes);
    spread between other modules' tests, a module fixture would even be built again each time.
    Every test of such a module goes with it, including tests that fetch the fixture by name.
    Modules without one stay spread test by test, but for tests given the built site: they join
    the worker that builds it (the ``site`` group), rather than wait for the build on another.
    Explicit ``xdist_group`` marks win.
    """
    shared = {
        d.baseid
        for defs in session._fixturemanager._arg2fixturedefs.values()
        for d in defs
        if d.scope in ("module", "session")
    }
    for item in items:
        module = item.nodeid.split("::")[0]
        if item.get_closest_marker("xdist_group") is None and module in shared:
            item.add_marker(pytest.mark.xdist_group(module))
        elif item.get_closest_marker("xdist_group") is None and "site" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("site"))
        # A test given the built site, a browser, JupyterLab or a graded notebook is slow whether or
        # not it says so: `make check` (``-m "not slow"``) must not build or grade them.
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


# Last, after the environment above is set: fixtures that several modules read, computed once per
# session: the bad submissions' two runs, the run's one site, its server and its one reading of
# each page, and a learner's graded exercises (each module says why here; a test module that
# imported one would define another, computed again: tests/test_fixtures_defined_once.py).
from tests.bad_submission_runs import bad_submissions_course, limits_run, main_run  # noqa: E402, F401
from tests.progress_grading import graded  # noqa: E402, F401
from tests.site_build import base_url, read_pages, site  # noqa: E402, F401
