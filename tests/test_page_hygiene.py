"""What the built pages look like beyond their words (``docs/hooks/page_hygiene.py``).

- no ``Out[N]:`` prompt beside an output a reader cannot see;
- one printout in one block: no two outputs of the same stream side by side;
- no stray value under a printout: a cell that printed shows no ``repr`` of its last expression,
  and a printout shows no raw ``repr`` (``tensor(0.66)``) beside its formatted numbers;
- the 404 page's links work from any depth: each is absolute from the site's root, and exists;
- the sitemap is filled or not there;
- every heat map has a colour bar: the lessons' and notebooks' figures, and the grader's.

Each check has a fast test over planted HTML or code that shows it can fail, and a test over the
built site (or the sources) that it does not.
"""

from __future__ import annotations

import ast
import itertools
import json
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from bs4 import BeautifulSoup

from tests.docs_hooks import load_hook

ROOT = Path(__file__).resolve().parents[1]


hygiene = load_hook("page_hygiene")


# -- what a page's outputs may not show ---------------------------------------------------------


def output_problems(page_html: str) -> list[str]:
    """Each empty prompt, split printout and stray value of a page, as a sentence."""
    soup = BeautifulSoup(page_html, "html.parser")
    found = []
    for number, area in enumerate(soup.select("div.jp-OutputArea"), 1):
        children = area.find_all("div", class_="jp-OutputArea-child", recursive=False)
        for child in children:
            prompt = child.find("div", class_="jp-OutputArea-prompt")
            said = prompt.get_text(strip=True) if prompt is not None else ""
            if said and not hygiene.visible_text(child):
                found.append(f"output area {number}: an empty {said} prompt")
        for first, second in itertools.pairwise(children):
            same = hygiene.mime_type(first) == hygiene.mime_type(second)
            if hygiene.is_stream(first) and hygiene.is_stream(second) and same:
                found.append(f"output area {number}: one printout split across blocks")
        for index, child in enumerate(children):
            if hygiene.is_result(child) and any(hygiene.is_stream(c) or hygiene.is_figure(c) for c in children[:index]):
                text = hygiene.visible_text(child)
                found.append(f"output area {number}: a stray value {text[:40]!r} under a printout or a figure")
            if hygiene.is_stream(child):
                found += [
                    f"output area {number}: a raw repr in a printout: {line.strip()[:80]!r}"
                    for line in hygiene.visible_text(child).splitlines()
                    if RAW_REPR.search(line)
                ]
    return found


# A value printed as Python shows it, not formatted: `print(f"{x:.3f}", y)` with y a tensor.
RAW_REPR = re.compile(r"\b(tensor|np\.float\d*|np\.int\d*|array)\(")


def _child(kind: str, text: str, prompt: str = "") -> str:
    classes = {"stream": "", "result": " jp-OutputArea-executeResult"}[kind]
    return (
        f'<div class="jp-OutputArea-child{classes}"><div class="jp-OutputPrompt jp-OutputArea-prompt">{prompt}</div>'
        f'<div class="jp-RenderedText jp-OutputArea-output" data-mime-type="text/plain"><pre>{text}</pre></div></div>'
    )


def _area(*children: str) -> str:
    return f'<div class="jp-OutputArea jp-Cell-outputArea">{"".join(children)}</div>'


SCRIPT_ONLY = (
    '<div class="jp-OutputArea-child jp-OutputArea-executeResult"><div class="jp-OutputPrompt jp-OutputArea-prompt">'
    'Out[11]:</div><div class="jp-RenderedHTMLCommon jp-OutputArea-output" data-mime-type="text/html">'
    '<script type="application/vnd.bertlab.claims+json">{"claims": {}}</script></div></div>'
)
PLANTED = _area(_child("stream", "head  a  b\n"), _child("stream", "row   1  2\n"), _child("result", "True", "Out[9]:"))
# a chart, then the claim the cell ended with (lesson 1's parameter shares once showed it)
FIGURE = (
    '<div class="jp-OutputArea-child jp-OutputArea-displayData"><div class="jp-OutputPrompt jp-OutputArea-prompt">'
    '</div><div class="jp-RenderedImage jp-OutputArea-output" data-mime-type="image/png">'
    '<img src="data:image/png;base64,AAAA" alt="a chart"></div></div>'
)
PLANTED_UNDER_FIGURE = _area(FIGURE, _child("result", "True", "Out[12]:"))


def test_the_checks_find_each_planted_defect():
    found = output_problems(PLANTED + _area(SCRIPT_ONLY))
    assert any("split across blocks" in f for f in found), found
    assert any("stray value 'True'" in f for f in found), found
    assert any("empty Out[11]: prompt" in f for f in found), found
    assert any("stray value 'True' under a printout or a figure" in f for f in output_problems(PLANTED_UNDER_FIGURE))
    raw = output_problems(_area(_child("stream", "share 0.667 tensor(0.6663)\n")))
    assert raw == ["output area 1: a raw repr in a printout: 'share 0.667 tensor(0.6663)'"], raw
    # A value a cell shows on its own, with its prompt, is what the cell is for.
    assert output_problems(_area(_child("result", "tensor([1., 2.])", "Out[3]:"))) == []


def test_the_hook_mends_each_planted_defect_and_keeps_the_claims():
    mended = hygiene.tidy(PLANTED + _area(SCRIPT_ONLY))
    assert output_problems(mended) == []
    soup = BeautifulSoup(mended, "html.parser")
    assert [pre.get_text() for pre in soup.find_all("pre")] == ["head  a  b\nrow   1  2\n"]
    assert soup.find("script", type="application/vnd.bertlab.claims+json") is not None  # read by claims.py
    under_figure = hygiene.tidy(PLANTED_UNDER_FIGURE)
    assert output_problems(under_figure) == [] and "<img" in under_figure and "True" not in under_figure
    # A value shown on its own keeps its prompt.
    alone = hygiene.tidy(_area(_child("result", "tensor([1., 2.])", "Out[3]:")))
    assert "Out[3]:" in alone


def notebook_pages(root: Path) -> list[Path]:
    return sorted(root.glob("lessons/*/index.html")) + sorted(root.glob("exercises/*/*/index.html"))


def test_no_notebook_page_shows_an_empty_prompt_a_split_printout_or_a_stray_value(site):
    checked = notebook_pages(site)
    assert len(checked) >= 9, "the lesson pages were not found"
    outputs = sum(len(BeautifulSoup(p.read_text(), "html.parser").select("div.jp-OutputArea")) for p in checked)
    assert outputs > 20, "no output areas found: the page structure changed and this test checks nothing"
    found = [f"{p.relative_to(site).parent}: {problem}" for p in checked for problem in output_problems(p.read_text())]
    assert not found, "\n".join(found)


# -- the 404 page and the sitemap ------------------------------------------------------------------


def links(page_html: str) -> list[str]:
    return re.findall(r'\b(?:href|src)="([^"]*)"', page_html)


def broken_from_any_depth(root: Path, page_html: str) -> list[str]:
    """The links of a page served at any path that do not reach a file of the site at ``root``."""
    broken = []
    for link in links(page_html):
        parts = urlsplit(link)
        if parts.scheme or link.startswith(("#", "mailto:", "data:")):
            continue
        if not link.startswith("/"):
            broken.append(f"{link} (relative: it breaks below the site's root)")
            continue
        target = root / parts.path.lstrip("/")
        if not (target.is_file() or (target / "index.html").is_file()):
            broken.append(f"{link} (no such file in the site)")
    return broken


def test_a_relative_link_on_the_404_page_is_found(tmp_path):
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "site.css").write_text("")
    page = (
        '<link href="/assets/site.css"><a href="../setup/">x</a><a href="/missing/">y</a><a href="https://a.b/">z</a>'
    )
    assert broken_from_any_depth(tmp_path, page) == [
        "../setup/ (relative: it breaks below the site's root)",
        "/missing/ (no such file in the site)",
    ]


def test_the_404_page_links_work_from_any_depth(site):
    page = (site / "404.html").read_text()
    assert len(links(page)) > 10, "the 404 page has no links: this test checks nothing"
    assert not broken_from_any_depth(site, page), broken_from_any_depth(site, page)
    # The theme's scripts (search, navigation) resolve the site's pages from this base.
    config = re.search(r'"base":\s*"([^"]*)"', page)
    assert config is not None and config.group(1) == "/", config


def sitemap_problems(root: Path) -> list[str]:
    sitemap = root / "sitemap.xml"
    if not sitemap.exists():
        return [] if not (root / "sitemap.xml.gz").exists() else ["sitemap.xml.gz without sitemap.xml"]
    pages = {p.parent for p in root.rglob("index.html")} - {root / "search"}
    listed = re.findall(r"<loc>([^<]+)</loc>", sitemap.read_text())
    if len(listed) < len(pages):
        return [f"sitemap.xml lists {len(listed)} addresses for {len(pages)} pages"]
    return []


def test_an_empty_sitemap_is_found(tmp_path):
    (tmp_path / "index.html").write_text("")
    (tmp_path / "sitemap.xml").write_text('<?xml version="1.0"?><urlset></urlset>')
    assert sitemap_problems(tmp_path) == ["sitemap.xml lists 0 addresses for 1 pages"]


def test_the_sitemap_is_filled_or_not_built(site):
    assert (site / "index.html").is_file()
    assert sitemap_problems(site) == []


# -- heat maps and their colour bars ------------------------------------------------------------

HEAT_MAPS = {"imshow", "pcolormesh", "pcolor", "matshow", "heatmap"}


def code_cells() -> list[tuple[str, str]]:
    """(where, code) of each code cell of the lessons and of the notebooks learners and instructors run."""
    import jupytext

    cells = []
    for path in sorted((ROOT / "lessons").glob("[0-9][0-9]-*.py")):
        notebook = jupytext.read(path)
        cells += [(f"{path.name} cell {i}", c.source) for i, c in enumerate(notebook.cells) if c.cell_type == "code"]
    for folder in ("exercises", "solutions"):
        for path in sorted((ROOT / folder).glob("*/*.ipynb")):
            notebook = json.loads(path.read_text())
            cells += [
                (f"{path.name} cell {i}", "".join(c["source"]))
                for i, c in enumerate(notebook["cells"])
                if c["cell_type"] == "code"
            ]
    return cells


def called(code: str) -> set[str]:
    """The names of the functions and methods ``code`` calls (nothing when it does not parse)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:  # a notebook's magic or a stub: read it as text
        return set(re.findall(r"\.?(\w+)\(", code))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def heat_maps_without_colour_bar(cells: list[tuple[str, str]]) -> list[str]:
    return [where for where, code in cells if HEAT_MAPS & called(code) and "colorbar" not in called(code)]


def test_a_heat_map_without_a_colour_bar_is_found():
    cells = [
        ("bare", "fig, ax = plt.subplots()\nax.imshow(x)\nplt.show()"),
        ("with bar", "im = ax.pcolormesh(x)\nfig.colorbar(im, ax=ax)"),
        ("a line plot", "ax.plot(x)"),
    ]
    assert heat_maps_without_colour_bar(cells) == ["bare"]


def test_every_heat_map_of_the_lessons_and_notebooks_has_a_colour_bar():
    cells = code_cells()
    assert sum(1 for _, code in cells if HEAT_MAPS & called(code)) >= 3, "no heat map found: this test checks nothing"
    assert heat_maps_without_colour_bar(cells) == []


@pytest.mark.parametrize("layered", [False, True])
def test_the_graders_heat_maps_each_have_a_colour_bar(layered):
    torch = pytest.importorskip("torch")
    from bertlab.checks import heatmap
    from bertlab.checks.compare import Difference

    expected = torch.zeros(2, 5, 8)
    got = expected.clone()
    got[1, 3, 4] = 1.0
    layers = [(f"hidden_states[{i}]", expected, got) for i in range(3)] if layered else []
    figure = heatmap.figure(
        Difference("hidden_states[2]" if layered else "x", ("batch", "token", "dim"), expected, got, layers)
    )
    images = [image for ax in figure.axes for image in ax.get_images()]
    assert len(images) == (2 if layered else 1)
    assert all(image.colorbar is not None for image in images), "a heat map of the grader has no colour bar"


# -- figure legends: a caret is drawn as a caret outside mathtext --------------------------------

OUTSIDE_MATH = re.compile(r"\$[^$]*\$")


def caret_outside_math(text: str) -> bool:
    return "^" in OUTSIDE_MATH.sub("", text)


def literal_labels(code: str) -> list[str]:
    """The literal text of every ``label=`` argument of ``code``: strings and f-strings' fixed parts
    (not the text a ``.replace`` looks for, which is not drawn)."""
    found = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.keyword) and node.arg == "label":
            replaced = {
                id(call.args[0])
                for call in ast.walk(node.value)
                if isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == "replace"
                and call.args
            }
            found += [
                part.value
                for part in ast.walk(node.value)
                if isinstance(part, ast.Constant) and isinstance(part.value, str) and id(part) not in replaced
            ]
    return found


def test_a_caret_in_a_legend_is_found():
    code = 'ax.plot(x, label="|a| / |x|")\nax.bar(x, label=f"T = 6H = {c}")'
    assert literal_labels(code) == ["|a| / |x|", "T = 6H = "]
    assert caret_outside_math("W^O") and not caret_outside_math("$W^O$")
    # a part name with a caret given as a label unchanged, as lesson 7 once did
    assert not legend_maps_to_math("for p in PARTS:\n    ax.plot(x, y, label=p)\n", "W^O")


def legend_maps_to_math(code: str, name: str) -> bool:
    """Whether ``code`` turns ``name`` into mathtext (``.replace("W^O", "$W^O$")``) in a label."""
    return any(
        isinstance(node, ast.keyword)
        and node.arg == "label"
        and f".replace({name!r}, {'$' + name + '$'!r})" in ast.unparse(node.value).replace('"', "'")
        for node in ast.walk(ast.parse(code))
    )


def test_no_legend_of_the_lessons_shows_a_caret_outside_math():
    lessons = sorted((ROOT / "lessons").glob("[0-9][0-9]-*.py"))
    found = [
        f"{path.name}: label {label!r}"
        for path in lessons
        for label in literal_labels(path.read_text())
        if caret_outside_math(label)
    ]
    # the labels a lesson draws from a list of names (layer_cost.PARTS on lesson 7's chart)
    from bertlab.experiments import layer_cost

    code = (ROOT / "lessons" / "07-putting-it-together.py").read_text()
    assert "label=p" in code.replace(" ", "") or "layer_cost.PARTS" in code
    found += [
        f"07-putting-it-together.py: part {name!r} drawn as it is"
        for name in layer_cost.PARTS
        if caret_outside_math(name) and not legend_maps_to_math(code, name)
    ]
    assert not found, "\n".join(found)
