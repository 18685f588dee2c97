"""A lesson's code as the learner reads it: the experiment, without the page's own checking.

A lesson records the numbers its prose quotes and the comparisons it makes as it runs
(``claims.value(...)``, ``claims.claim(...)``, ``claims.publish()``: ``bertlab.experiments.claims``).
They run at every build, and the claims hook checks them; on the page they would sit between the
lines a learner reads. This hook takes them out of each code cell the page shows, and out of the
text its copy button copies: what is left is the experiment alone, and it still runs (the
statements removed only record). The import of ``claims`` goes with them. A cell that held
nothing else keeps its output (``publish``'s script) and shows no code (``assets/site.css``).

A statement is removed whole, wherever it stands (in a loop, a ``with``), and so is a loop that
only records; what is left must still compile and must not name ``claims``, or the build fails,
naming the cell.
"""

from __future__ import annotations

import ast
import html
import re

from mkdocs.exceptions import PluginError
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

MODULE = "claims"
# A figure's description, when it opens the cell (figure_alt.py reads it): no code to show.
ALT_COMMENT = re.compile(r"\A# alt: .*(?:\n#   .*)*")
# A code cell as mkdocs-jupyter writes it: the highlighted code, then the text the copy button copies.
# (Either order of the copy text's attributes: a hook that parses the page writes them sorted.)
CELL = re.compile(
    r'<div class="highlight-ipynb hl-python ?"><pre>(?:.*?)</pre></div>(\s*)<div (?:class="clipboard-copy-txt" '
    r'id="(cell-\d+)"|id="(cell-\d+)" class="clipboard-copy-txt")>(.*?)</div>',
    re.S,
)
# The mark a cell that only checked leaves: site.css hides the input of such a cell.
CHECKS_ONLY = "bertlab-checks-only"


def _records(node: ast.AST) -> bool:
    """A statement that only records for the build: ``claims.x(...)``, ``_ = claims.x(...)``, or a
    loop, ``if`` or ``with`` whose body does nothing else."""
    value = None
    if isinstance(node, ast.Expr):
        value = node.value
    elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) and t.id == "_" for t in node.targets):
        value = node.value
    if isinstance(node, ast.For | ast.While | ast.If | ast.With):  # a block that only records
        return all(_records(child) for child in [*node.body, *getattr(node, "orelse", [])])
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and isinstance(value.func.value, ast.Name)
        and value.func.value.id == MODULE
    )


def strip(source: str) -> str:
    """``source`` without its recording statements, the import of ``claims``, and the comment
    that describes the cell's figure (``# alt: ...``, read by figure_alt.py)."""
    described = ALT_COMMENT.match(source)
    if described:
        source = source[described.end() :].lstrip("\n")
    tree = ast.parse(source)
    lines = source.splitlines()
    drop: set[int] = set()
    rewritten = False  # an import that keeps other names is rewritten, not dropped
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and _records(node):
            drop.update(range(node.lineno - 1, (node.end_lineno or node.lineno)))
        elif isinstance(node, ast.ImportFrom) and any(a.name == MODULE for a in node.names):
            kept = [a for a in node.names if a.name != MODULE]
            first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
            drop.update(range(first + 1, last + 1))
            if kept:
                names = ", ".join(a.name if a.asname is None else f"{a.name} as {a.asname}" for a in kept)
                lines[first] = f"{' ' * node.col_offset}from {node.module} import {names}"
                rewritten = True
            else:
                drop.add(first)
    if not drop and not rewritten:
        return source
    for first in sorted(drop):  # the comment lines just above a removed statement speak of it
        above = first - 1
        while above >= 0 and above not in drop and lines[above].lstrip().startswith("#"):
            drop.add(above)
            above -= 1
    kept_lines = [line for i, line in enumerate(lines) if i not in drop]
    return re.sub(r"\n{4,}", "\n\n\n", "\n".join(kept_lines)).strip("\n")


def _check(shown: str, where: str) -> None:
    try:
        tree = ast.parse(shown)
    except SyntaxError as err:
        raise PluginError(
            f"{where}: without its claims calls the cell no longer compiles ({err.msg}, line {err.lineno}): "
            "give the block a statement of its own, or move the calls out of it"
        ) from err
    if any(isinstance(n, ast.Name) and n.id == MODULE for n in ast.walk(tree)):
        raise PluginError(f"{where}: the code shown still uses `{MODULE}`: record with a statement of its own")


def hide_checks(page_html: str, where: str) -> str:
    """``page_html`` with every code cell shown and copied without its recording statements."""

    def replace(found: re.Match) -> str:
        space, cell_id, copied = found.group(1), found.group(2) or found.group(3), found.group(4)
        source = html.unescape(copied)
        shown = strip(source)
        if shown == source:
            return found.group(0)
        _check(shown, f"{where}, {cell_id}")
        if not shown.strip():
            return f'<div class="highlight-ipynb hl-python {CHECKS_ONLY}"></div>'
        code = highlight(shown, PythonLexer(), HtmlFormatter(nowrap=True))
        return (
            f'<div class="highlight-ipynb hl-python"><pre><span></span>{code}</pre></div>{space}'
            f'<div class="clipboard-copy-txt" id="{cell_id}">{html.escape(shown, quote=False)}</div>'
        )

    return CELL.sub(replace, page_html)


def on_page_content(page_html, page, config, files):
    if not (page.file.src_uri.startswith("lessons/") and page.file.src_uri.endswith(".py")):
        return page_html
    return hide_checks(page_html, page.file.src_uri)
