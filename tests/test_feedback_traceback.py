"""A failed check shows the learner's cell and the message, not the grader's frames: in IPython,
and in a real JupyterLab, in the browser, where learners read it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.conftest import ROOT

SETUP = "from bertlab.checks import check"
# A layer_norm that returns its input: Task 1.2's values check fails, from inside a helper of the learner's.
FAILING = "def layer_norm(x, weight, bias, eps):\n    return x\n\ndef grade():\n    check('1.2', layer_norm)\n\ngrade()"
GRADER_FILES = ("bertlab/checks", "framework.py", "__init__.py", "site-packages")


def test_ipython_shows_the_learners_lines_then_the_message(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_cell(SETUP)
    shell.run_cell(FAILING)
    shown = capsys.readouterr().out
    assert "[Task 1.2] layer_norm: values differ" in shown, shown
    assert "check('1.2', layer_norm)" in shown and "in grade" in shown, shown  # the learner's own frames
    assert not [name for name in GRADER_FILES if name in shown], shown


# A grade cell as the exercises lock it: a comment naming the check, then the call.
LAYER_NORM_RETURNS_X = "def layer_norm(x, weight, bias, eps):\n    return x"
GRADE_CELL = '# Task 1.2, shapes and values: both LayerNorms (1 point)\ncheck("1.2", layer_norm, upto="values")'


def test_a_grade_cells_frame_is_labelled_the_check_cell_not_the_learners(capsys):
    """The learner did not write the locked ``check(...)`` line: it is labelled for what it is."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    for source in (SETUP, LAYER_NORM_RETURNS_X, GRADE_CELL):
        shell.run_cell(source)
    shown = capsys.readouterr().out
    assert "The check cell, line 2:" in shown and 'check("1.2", layer_norm, upto="values")' in shown, shown
    assert "Your code" not in shown, shown


@pytest.mark.parametrize(
    "cell",
    [
        # the learner's own code in the cell beside the call
        'x = 1\ncheck("1.2", layer_norm, upto="values")',
        # a call through a name of the learner's: not the course's check at the top of a check cell
        'def mine(*args, **kwargs):\n    check(*args, **kwargs)\n\nmine("1.2", layer_norm, upto="values")',
    ],
    ids=["code-beside-the-call", "own-helper"],
)
def test_a_cell_with_code_of_the_learners_stays_theirs(cell, capsys):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    for source in (SETUP, LAYER_NORM_RETURNS_X, cell):
        shell.run_cell(source)
    shown = capsys.readouterr().out
    assert "[Task 1.2] layer_norm: values differ" in shown, shown
    assert "Your code, line" in shown and "The check cell" not in shown, shown


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def jupyterlab(tmp_path):
    """JupyterLab serving a notebook with the setup cell and the failing cell: (address, token)."""
    cells = [
        {"cell_type": "code", "metadata": {}, "source": s, "outputs": [], "execution_count": None}
        for s in (SETUP, FAILING)
    ]
    notebook = {
        "cells": cells,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (tmp_path / "graded.ipynb").write_text(json.dumps(notebook))
    port, token = _free_port(), "bertlab-test"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            f"--port={port}",
            "--ip=127.0.0.1",
            f"--ServerApp.token={token}",
            f"--ServerApp.root_dir={tmp_path}",
            "--allow-root",
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "JUPYTER_CONFIG_DIR": str(tmp_path / ".jupyter")},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode()[-2000:]
                assert time.monotonic() < deadline, "JupyterLab did not answer within 60 s"
                time.sleep(0.5)
        yield base, token
    finally:
        server.terminate()
        server.wait(timeout=30)


def _wait_for_an_idle_kernel(base: str, token: str) -> None:
    """The notebook's kernel has started and waits: keys pressed before that run nothing."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        sessions = json.load(urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=5))
        if any(s["kernel"]["execution_state"] == "idle" for s in sessions):
            return
        time.sleep(0.5)
    raise AssertionError("the notebook's kernel did not start within 120 s")


@pytest.mark.timeout(300)
def test_jupyterlab_shows_the_learners_lines_then_the_message(browser, jupyterlab):
    base, token = jupyterlab
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(f"{base}/lab/tree/graded.ipynb?token={token}")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
        _wait_for_an_idle_kernel(base, token)
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
        page.locator(".jp-Notebook .jp-Cell").first.click()
        for _ in range(2):
            page.keyboard.press("Shift+Enter")
        error = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
        error.first.wait_for(timeout=180_000)
        shown = error.first.inner_text()
    finally:
        page.close()
    assert "[Task 1.2] layer_norm: values differ" in shown, shown
    assert "check('1.2', layer_norm)" in shown, shown
    assert not [name for name in GRADER_FILES if name in shown], shown
    assert str(ROOT) not in shown, shown
