"""Find learner cells that reach for the grader itself.

The verdict is made outside the learner's process, so rebinding ``check`` or patching
``bertlab.checks`` there changes nothing; a notebook that tries is still told so and loses its
points, because under a plain ``nbgrader autograde`` (grade cells run in the learner's kernel)
the same cell would have bought a false pass. Only cells the learner wrote are read: locked
cells come from the instructor's source.
"""

from __future__ import annotations

import ast

# The course's own grading and reference code: a learner's cell has no business touching it.
GRADER_MODULES = (
    "bertlab.checks",
    "bertlab.grading",
    "bertlab.diagnose",
    "bertlab.capture",
    "bertlab.experiments",
    "bertlab.given_parts",  # what makes the course's modules refuse learner code during a check
)
HOOKS = {
    "set_custom_exc": "replaces how errors are reported",
    "settrace": "traces the grader's code",
    "setprofile": "intercepts the grader's calls",
}
ALLOWED_IMPORT = "from bertlab.checks import check"


def learner_cells(nb) -> list[tuple[int, str]]:
    """(index, source) of the code cells the learner may have written (not locked)."""
    return [
        (index, cell.source)
        for index, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and not cell.get("metadata", {}).get("nbgrader", {}).get("locked")
    ]


def _mentions_grader(dotted: str) -> bool:
    return any(dotted == m or dotted.startswith(m + ".") for m in GRADER_MODULES) or dotted in (
        "bertlab.checks",
        "checks",
    )


def _dotted(node) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def findings(source: str) -> list[tuple[int, str]]:
    """(line, reason) for each way ``source`` reaches for the grader."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # it cannot run, so it cannot tamper; the syntax error is reported on its own
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [a.name for a in node.names]
            if ast.unparse(node) == ALLOWED_IMPORT:
                continue
            if _mentions_grader(node.module) or (
                node.module == "bertlab"
                and set(names) & {"checks", "grading", "diagnose", "capture", "experiments", "given_parts"}
            ):
                found.append((line, f"imports from the grader's code ({node.module})"))
            elif any((a.asname or a.name) == "check" for a in node.names):
                found.append((line, "rebinds `check`"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _mentions_grader(alias.name):
                    found.append((line, f"imports the grader's code ({alias.name})"))
                elif alias.asname == "check":
                    found.append((line, "rebinds `check`"))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == "check":
            found.append((line, "rebinds `check`"))
        elif isinstance(node, ast.Name) and node.id == "check" and isinstance(node.ctx, (ast.Store, ast.Del)):
            found.append((line, "rebinds `check`"))
        elif isinstance(node, (ast.Global, ast.Nonlocal)) and "check" in node.names:
            found.append((line, "rebinds `check`"))
        elif isinstance(node, ast.Attribute):
            if node.attr in HOOKS:
                found.append((line, f"calls {node.attr}, which {HOOKS[node.attr]}"))
            elif isinstance(node.ctx, (ast.Store, ast.Del)) and (
                node.attr == "check" or _mentions_grader(_dotted(node.value))
            ):
                found.append((line, f"patches {_dotted(node)}"))
        elif (
            isinstance(node, ast.Call)
            and _dotted(node.func) in ("setattr", "delattr", "builtins.setattr")
            and node.args
        ):
            target = _dotted(node.args[0])
            name = node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else None
            if name == "check" or (target and _mentions_grader(target)):
                found.append((line, f"patches {target or 'an object'} with {_dotted(node.func)}"))
    return sorted(set(found))


def scan(nb) -> str | None:
    """A message naming the first learner cell that reaches for the grader, or None."""
    for index, source in learner_cells(nb):
        hits = findings(source)
        if hits:
            line, reason = hits[0]
            text = source.splitlines()[line - 1].strip() if 0 < line <= len(source.splitlines()) else ""
            return (
                f"this notebook changes the grader: cell {index + 1}, line {line} {reason}: `{text}`\n"
                "  Grade cells only count when nothing in the notebook rebinds or patches the grading code; "
                "remove that line and grade again."
            )
    return None
