"""Verdicts are data: what the grader does never depends on the wording of a failure's message.

A failure carries its fields (``CheckFailed.mistake``, ``.cause``, ``.values``; a verdict's
``CheckResult.mistake``, ``.cause``, ``.lesson``, ``.section``), and everything that decides reads
them. This test fails when code of the package looks into a message's text instead: a string
searched for in ``str(err)`` or in a ``message``, ``reason`` or ``error``, a ``startswith`` on one,
a regular expression over one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from bertlab.checks import harness
from bertlab.checks.framework import CheckFailed

ROOT = Path(__file__).resolve().parents[1]
TEXTS = {"message", "messages", "first_message", "reason", "error", "err", "msg", "text_of_failure"}
# The one place allowed: torch's own words for an autograd error (not ours to reword), read where
# the learner's exception is caught and turned into an ``Outcome`` kind.
ALLOWED = {("src/bertlab/checks/harness.py", "modified by an inplace operation")}


def _is_text(node: ast.AST, texts: set[str] = TEXTS) -> bool:
    """An expression that is a failure's text: ``str(x)``, a name or attribute like ``message``."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == "str":
            # str(err), str(self): an object's text; str(Path(...)) and the like are not a failure's
            if sub.args and isinstance(sub.args[0], (ast.Name, ast.Attribute)):
                return True
        if isinstance(sub, ast.Name) and sub.id in texts:
            return True
        if isinstance(sub, ast.Attribute) and sub.attr in TEXTS:
            return True
    return False


def readings(source: str) -> list[tuple[int, str]]:
    """(line, the string looked for) of each place ``source`` reads a message's text to decide."""
    tree = ast.parse(source)
    texts = set(TEXTS)  # and each name that runs over texts: ``m`` of ``for m in messages``
    for node in ast.walk(tree):
        if isinstance(node, (ast.comprehension, ast.For)) and isinstance(node.target, ast.Name):
            if _is_text(node.iter):
                texts.add(node.target.id)
    is_text = lambda node: _is_text(node, texts)  # noqa: E731
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            left = node.left
            if isinstance(left, ast.Constant) and isinstance(left.value, str) and any(map(is_text, node.comparators)):
                found.append((node.lineno, left.value))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name, owner = node.func.attr, node.func.value
            if name in {"startswith", "endswith"} and is_text(owner) and node.args:
                first = node.args[0]
                found.append((node.lineno, str(first.value) if isinstance(first, ast.Constant) else "?"))
            if name in {"search", "match", "fullmatch", "findall"} and node.args:
                # re.search(PATTERN, text) or PATTERN.search(text)
                module_function = isinstance(owner, ast.Name) and owner.id == "re"
                text = node.args[1] if module_function and len(node.args) > 1 else node.args[0]
                if text is not node.args[0] or not module_function:
                    if is_text(text):
                        found.append((node.lineno, "a regular expression"))
    return found


def test_no_code_of_the_package_decides_on_a_message_text():
    files = sorted((ROOT / "src" / "bertlab").rglob("*.py"))
    assert len(files) > 50
    offending = [
        f"{path.relative_to(ROOT)}:{line}: {what!r}"
        for path in files
        for line, what in readings(path.read_text())
        if (str(path.relative_to(ROOT)), what) not in ALLOWED
    ]
    assert offending == []


@pytest.mark.parametrize(
    "code",
    [
        'if "values differ" in str(err).splitlines()[0]: pass',
        'if " raised " not in str(err): pass',
        'if any(m.startswith("timed out after") for m in messages): pass',
        'if "MB of memory" in result.reason: pass',
        "match = HINT.search(message)\nm = re.search(PATTERN, task.first_message)",
    ],
)
def test_the_scan_finds_each_way_of_reading_a_message(code):
    assert readings(code)


def test_a_failure_keeps_its_fields_through_added_lines():
    failed = CheckFailed("[Task 3.2] BertSelfAttention: values differ", None, None, "values")
    more = failed.adding("a line under it", mistake="some-mistake")
    assert (more.cause, more.mistake) == ("values", "some-mistake")
    assert str(more).splitlines() == ["[Task 3.2] BertSelfAttention: values differ", "  a line under it"]
    assert more.adding("x", headline_only=True).headline == failed.headline


def test_torchs_in_place_autograd_error_is_an_outcome_kind():
    def changes_what_backward_saved(x):
        y = torch.sigmoid(x)
        y.mul_(2.0)  # sigmoid's backward needs its output as it was
        return y

    x = torch.ones(3, requires_grad=True)
    outcome = harness.invoke(lambda: changes_what_backward_saved(x).sum().backward(), grad=True)
    assert outcome.kind == "saved_tensor_changed", outcome
