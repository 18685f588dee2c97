"""The page transforms a warm build reads back instead of parsing the page again (docs/hooks/page_memo.py)."""

from __future__ import annotations

import logging
from pathlib import Path

from tests.docs_hooks import load_hook


def hook_file(tmp_path: Path, source: str = "def transform(): ...\n") -> str:
    path = tmp_path / "some_hook.py"
    path.write_text(source)
    return str(path)


def test_a_result_is_read_back_for_the_same_page_and_hook_and_computed_anew_otherwise(tmp_path):
    memo = load_hook("page_memo")
    calls = []

    def compute(tag):
        return lambda: calls.append(tag) or f"<p>{tag}</p>"

    hook = hook_file(tmp_path)
    assert memo.remembered(tmp_path, hook, ["page"], compute("a")) == "<p>a</p>"
    assert memo.remembered(tmp_path, hook, ["page"], compute("b")) == "<p>a</p>"  # read back
    assert memo.remembered(tmp_path, hook, ["page, edited"], compute("c")) == "<p>c</p>"
    assert memo.remembered(tmp_path, hook, ["pa", "ge"], compute("d")) == "<p>d</p>"  # not "page"
    changed = hook_file(tmp_path, "def transform(): return 1\n")
    assert memo.remembered(tmp_path, changed, ["page"], compute("e")) == "<p>e</p>"
    assert calls == ["a", "c", "d", "e"]


def test_a_computation_that_warns_is_not_kept_so_a_strict_build_fails_again(tmp_path):
    memo = load_hook("page_memo")
    hook, calls = hook_file(tmp_path), []

    def warns():
        calls.append(1)
        logging.getLogger("mkdocs.hooks.figure_alt").warning("a figure without a description")
        return "<img>"

    assert memo.remembered(tmp_path, hook, ["page"], warns) == "<img>"
    assert memo.remembered(tmp_path, hook, ["page"], warns) == "<img>"
    assert calls == [1, 1]
    assert not (tmp_path / memo.FOLDER).exists() or not any((tmp_path / memo.FOLDER).iterdir())


def test_prune_keeps_only_what_this_build_used(tmp_path):
    memo = load_hook("page_memo")
    hook = hook_file(tmp_path)
    memo.remembered(tmp_path, hook, ["old page"], lambda: "old")
    memo.prune(tmp_path)  # that build used it: kept
    assert len(list((tmp_path / memo.FOLDER).iterdir())) == 1
    memo.remembered(tmp_path, hook, ["new page"], lambda: "new")
    memo.prune(tmp_path)
    kept = list((tmp_path / memo.FOLDER).iterdir())
    assert len(kept) == 1 and kept[0].read_text() == '"new"'
