"""No import circles inside ``src/bertlab``: counting imports made inside functions, which hide a
circle from Python's loader but not from whoever reads the code."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

SRC = ROOT / "src"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, known: set[str]) -> set[str]:
    """The bertlab modules ``path`` imports, wherever in the file (``from a import b`` counts as
    ``a.b`` when that is a module, else ``a``)."""
    found = set()
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    return {name for name in found if name in known}


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in (SRC / "bertlab").rglob("*.py")}
    known = set(files)
    edges = {name: imports(path, known) for name, path in files.items()}
    # A package's __init__ runs before its modules: importing it is not importing them.
    return {name: {t for t in targets if not name.startswith(t + ".")} for name, targets in edges.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_inside_bertlab():
    assert not cycles(graph()), "import circles (each group imports itself round): " + "; ".join(
        " <-> ".join(group) for group in cycles(graph())
    )


def test_the_cycle_finder_finds_a_planted_cycle():
    edges = graph()
    assert "bertlab.grading.runner" in edges and len(edges) > 50  # the graph is the package's
    assert "bertlab.bert" in edges["bertlab.checks.framework"]  # the checks compare with the course's BERT
    edges["bertlab.bert"] = edges["bertlab.bert"] | {"bertlab.checks.framework"}
    assert any("bertlab.bert" in group for group in cycles(edges))
