"""Commit subjects a reader can scan: at most 72 characters (``CONTRIBUTING.md``, Commits)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 72
RULE = "in at most 72 characters"  # the sentence of CONTRIBUTING.md that states the rule


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def test_every_subject_since_the_rule_fits_in_72_characters():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no history to read")
    assert RULE in (ROOT / "CONTRIBUTING.md").read_text()
    # the commits that added the rule's sentence; the oldest is where the rule starts
    added = git("log", "--format=%H", "-S", RULE, "--", "CONTRIBUTING.md").split()
    if not added and git("rev-parse", "--is-shallow-repository").strip() == "true":
        pytest.skip("a shallow clone: the commit that wrote the rule is not in it")
    assert added, "the commit that wrote the rule is not in the history"
    since = git("log", "--format=%s", f"{added[-1]}^..HEAD").splitlines()
    assert since  # the rule's own commit at least
    long = [subject for subject in since if len(subject) > LIMIT]
    assert not long, f"subjects over {LIMIT} characters: {long}"
