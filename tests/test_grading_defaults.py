"""The grading limits' defaults are typed once (``bertlab.settings``): every command's help and
every page that quotes them says the same."""

from __future__ import annotations

import re
from pathlib import Path

from bertlab import cli
from bertlab.grading.pool import Limits
from bertlab.settings import DEFAULTS

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["docs/commands.md", "docs/honest-grading.md", "docs/learner-guide.md"]


def test_limits_default_to_the_settings():
    assert Limits() == Limits(DEFAULTS["timeout"], DEFAULTS["memory_limit"])


def test_every_command_help_quotes_the_settings(capsys):
    for command in ("grade", "autograde"):
        try:
            cli.main([command, "--help"])
        except SystemExit:
            pass
        text = " ".join(capsys.readouterr().out.split())
        for key in ("timeout", "memory_limit", "jobs"):
            assert f"grade.{key}, else {DEFAULTS[key]:g})" in text, (command, key)


def test_the_pages_quote_the_settings():
    quoted = {
        "timeout": r"(?:grade\.timeout` in `bertlab\.toml`, else|time limit\*\* \(default|limit \()\s*(\d+)",
        "memory_limit": r"(?:memory_limit` in `bertlab\.toml`, else|memory limit\*\* \(default)\s*(\d+)",
    }
    found = 0
    for page in PAGES:
        text = (ROOT / page).read_text()
        for key, pattern in quoted.items():
            for number in re.findall(pattern, text):
                found += 1
                assert float(number) == DEFAULTS[key], (page, key, number)
    assert found >= 5  # the commands page's four, the honest-grading page's
