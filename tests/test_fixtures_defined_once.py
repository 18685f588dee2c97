"""A fixture several test modules read is defined once: in ``tests/conftest.py``'s imports.

A module that imports a fixture from another module defines a fixture of its own under the same
name, and pytest computes a session fixture once per definition: the pages of the site were read
in Chromium twice, and a learner's exercises graded twice, that way. Read from the source, so a
module that cannot be imported alone is read all the same.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def fixtures_of(module: Path) -> set[str]:
    """The functions ``module`` defines under ``@pytest.fixture`` (with or without arguments)."""

    def is_fixture(decorator: ast.expr) -> bool:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        return ast.unparse(target) in ("pytest.fixture", "fixture")

    tree = ast.parse(module.read_text(encoding="utf-8"))
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and any(is_fixture(d) for d in node.decorator_list)
    }


def imported_fixtures(module: Path) -> list[str]:
    """``name from tests.X`` for each fixture ``module`` imports from another module of tests/."""
    found = []
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom) or node.module is None:
            continue
        name = node.module
        if name.startswith("tests."):
            source = TESTS / f"{name.removeprefix('tests.').replace('.', '/')}.py"
            defined = fixtures_of(source) if source.is_file() else set()
            found += [f"{alias.name} from {name}" for alias in node.names if alias.name in defined]
    return found


def test_no_test_module_imports_a_fixture():
    modules = [p for p in sorted(TESTS.glob("*.py")) if p.name != "conftest.py"]
    found = {p.name: names for p in modules if (names := imported_fixtures(p))}
    assert found == {}, "register these in tests/conftest.py and ask for them by name"


def test_conftest_registers_the_shared_fixtures_and_the_scan_sees_them():
    """The scan can fail: it sees the fixtures conftest imports, and what they are."""
    seen = imported_fixtures(TESTS / "conftest.py")
    assert {
        "site from tests.site_build",
        "read_pages from tests.site_build",
        "graded from tests.progress_grading",
    } <= set(seen), seen
