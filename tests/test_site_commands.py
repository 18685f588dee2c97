"""The Commands page keeps up with the CLI: each command's options and arguments in its own section."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "commands.md"


def sections(markdown: str) -> dict[str, str]:
    """Each ``## bertlab <cmd>`` section's text, up to the next ``## `` heading, by command."""
    found = {}
    for match in re.finditer(r"^## bertlab ([\w-]+)[^\n]*\n(.*?)(?=^## |\Z)", markdown, re.M | re.S):
        found[match.group(1)] = match.group(2)
    return found


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert actions, "bertlab's parser has no subcommands"
    return dict(actions[0].choices)


def arguments(parser: argparse.ArgumentParser) -> list[str]:
    """What `--help` shows for each option (its long form) and each positional argument."""
    shown = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if action.option_strings:
            shown.append(max(action.option_strings, key=len))
        else:
            shown.append(str(action.metavar or action.dest))  # the course's metavars are single names
    return shown


def code(section: str) -> str:
    """The section's code: fenced blocks and inline code spans, where a command line is written."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", section, re.M | re.S)
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", section, flags=re.M | re.S))
    return "\n".join(blocks + spans)


def mentions(section: str, name: str) -> bool:
    """``name`` as a word of the section's code (so ``--json`` is not found inside ``--jsonl``,
    and an argument named like an English word is not found in the prose)."""
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", code(section)) is not None


def test_sections_split_the_page_by_command():
    text = "## bertlab a\n--x TASK\n## Environment\n--y\n## bertlab b\n--z\n"
    assert sections(text) == {"a": "--x TASK\n", "b": "--z\n"}
    assert mentions("use `--json` here", "--json") and not mentions("`--jsonl`", "--json")
    assert mentions("```text\nbertlab x [TASK]\n```\n", "TASK") and not mentions("one TASK", "TASK")


def test_every_command_option_and_argument_is_in_its_own_section():
    cli = pytest.importorskip("bertlab.cli")
    documented = sections(PAGE.read_text())
    commands = subcommands(cli._parser())
    missing = [f"## bertlab {name}" for name in commands if name not in documented]
    checked = 0
    for name, parser in commands.items():
        shown = arguments(parser)
        checked += len(shown)
        missing += [f"bertlab {name} {arg}" for arg in shown if not mentions(documented.get(name, ""), arg)]
    assert checked, "no option or argument found in any subcommand (the parser walk is wrong)"
    assert not missing, f"missing from their command's section of docs/commands.md: {missing}"
