"""One notation: docs/notation.md defines the letters, the lessons and the FAQ use them.

Two kinds of checks. Retired wordings and letters (each one was true only under another
convention, or said more than the page's numbers) must not come back into a lesson or the FAQ.
And every symbol a lesson writes in its "## The equation(s)" section must be in the notation
page's tables, so a new letter cannot enter a lesson without being defined there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.course_text import markdown_cells

NOTATION = ROOT / "docs" / "notation.md"
FAQ = ROOT / "docs" / "faq.md"


def lessons() -> list[Path]:
    return sorted((ROOT / "lessons").glob("[0-9][0-9]-*.py"))


def prose_and_code() -> list[Path]:
    return [*lessons(), FAQ]


# -- retired letters and wordings ----------------------------------------------------------------

# (pattern, why it is retired); searched in every lesson (prose and code) and in the FAQ.
RETIRED = [
    # The letters of one layer: a is the attention update before the add, h the first Add &
    # Norm's output (lessons 4 and 5 used a for the latter).
    (r"^\s*a = .*attention\.output\(", "a is the attention update; the first Add & Norm's output is h"),
    (r'^\s*a = cap\.layer\([^)]*"intermediate"\)\.args', "the FFN's input is h, not a"),
    (r"^\s*(?:x|a) = cap\.layer\([^)]*\"intermediate\"\)\.args", "the FFN's input is h"),
    (r"output\*\* \$a\$", "the first Add & Norm's output is h"),
    (r"the residual is \$a\$", "the second residual is h"),
    (r"\$a\$, the output of the first Add & Norm", "the first Add & Norm's output is h"),
    (r"\|FFN update\| / \|a\|", "the FFN's update is divided by |h|"),
    (r"\\mathrm\{LN\}\^\{\\text\{(?:att|out)\}\}", "the two LayerNorms are LN_1 and LN_2"),
    (r"\\sum_t m_t", "the 0/1 padding mask is delta; m is the FFN's hidden activation"),
    (r"h_\[CLS\]", "h is the first Add & Norm's output, not the last layer's"),
    (r"\\mathrm\{FFN\}\(x\) =", "the FFN of a BERT layer reads h"),
    # The x W convention: W_1 is (H, 4H), so its keys are columns and W_2's values are rows.
    (r"rows of \$W_1\$", "keys are the columns of W_1 (rows of intermediate.dense.weight)"),
    (r"column of \$W_2\$", "values are the rows of W_2 (columns of output.dense.weight)"),
    (r"W_2\\,\\mathrm\{GELU\}\(W_1", "row vectors: GELU(h W_1 + b_1) W_2 + b_2"),
    # Vaswani et al.'s h (number of heads) and d_ff are A and 4H here.
    (r"\\mathrm\{head\}_h\b", "the number of heads is A"),
    (r"\\mathbb\{R\}\^\{hd", "the number of heads is A"),
    (r"d_\\text\{ff\}", "the FFN width is 4H"),
    (r"\bH\s*/\s*h\b", "the number of heads is A: d = H/A"),
    (r"(?:\$h\$|\bh) heads\b", "the number of heads is A"),
    (r"\bnum_heads\b|\bn_heads\b", "the number of heads is A (config.num_attention_heads)"),
    # Splitting the heads is view(B, T, A, d) then transpose(1, 2); a reshape straight to
    # (B, A, T, d) is the mistake lesson 3 shows, so prose must not present it as the split.
    (r"reshape (?:to|into) `?\(B, (?:heads|A|h), T, d\)", "view(B, T, A, d) then transpose(1, 2)"),
    # Sentences that said more, or other, than the numbers printed next to them.
    (r"Heads add independently", "W^O sums the heads' outputs, each through its own rows"),
    (r"keeps most of its attention", "lesson 3 prints the share padding keeps"),
    (r"at a constant size", "LayerNorm fixes mean and variance, not the norm"),
    (r"keeps its direction\b", "LayerNorm keeps the direction of the centred vector"),
    (r"rounding level \(or exactly zero\)", "the code says which difference is zero"),
    (r"makes BERT need a learning-rate warm-up", "lesson 6 measured a small gap at BERT's init"),
    (r"This is the warm-up Xiong et al\. explain", "Xiong et al. argue; lesson 6 measures"),
    (r"Xiong et\s+al\. prove", "Xiong et al. use a mean-field analysis under assumptions"),
    (r"reaches early layers through it undiminished", "He et al.: a direct term, not undiminished"),
]


def test_retired_patterns_are_searched_in_real_files():
    files = prose_and_code()
    assert len(files) >= 10 and all(path.stat().st_size > 0 for path in files)


@pytest.mark.parametrize("path", prose_and_code(), ids=lambda p: p.name)
def test_no_retired_letter_or_wording(path: Path):
    text = path.read_text()
    found = [
        f"{path.name}: {m.group(0).strip()!r} ({why})"
        for pattern, why in RETIRED
        for m in re.finditer(pattern, text, re.M)
    ]
    assert not found, "\n".join(found)


def test_retired_patterns_can_match():
    # each pattern is live: a sentence written the old way is caught
    old = (
        "    a = layer.attention.output(context, x)\n"
        "each of the $4H$ rows of $W_1$ is a key\n"
        r"$\mathrm{FFN}(x) = \max(0, xW_1)$, $W_2\,\mathrm{GELU}(W_1 h)$"
        "\n"
        "padding keeps most of its attention; Heads add independently\n"
    )
    hits = sum(bool(re.search(pattern, old, re.M)) for pattern, _ in RETIRED)
    assert hits >= 6


@pytest.mark.parametrize(
    "sentence",
    [
        "Vaswani et al. chose $d = H/h$ so that",
        "with $d = H / h$ features per head",
        "split into h heads of d features",
        "the $h$ heads of one layer",
        "a reshape to `(B, heads, T, d)` splits them",
        "a reshape into (B, A, T, d) splits them",
    ],
)
def test_heads_letter_and_split_are_caught(sentence: str):
    # the number of heads is A (h is the first Add & Norm's output), and the split is a view
    # then a transpose: each of these old wordings is refused in a lesson or the FAQ
    assert any(re.search(pattern, sentence, re.M) for pattern, _ in RETIRED), sentence


@pytest.mark.parametrize(
    "sentence",
    [
        "chose $d = H/A$ (their $h$ is our $A$)",
        "`view(B, T, A, d)` then `transpose(1, 2)`",
        "$h = \\mathrm{LN}_1(x + a)$",
    ],
)
def test_heads_patterns_leave_the_right_wording(sentence: str):
    assert not any(re.search(pattern, sentence, re.M) for pattern, _ in RETIRED), sentence


# -- the notation page covers the lessons' equations ---------------------------------------------

GREEK = {
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "varepsilon",
    "mu",
    "sigma",
    "Phi",
    "phi",
    "pi",
    "rho",
    "tau",
    "lambda",
    "theta",
    "omega",
    "Omega",
    "Sigma",
    "Delta",
    "eta",
    "xi",
}
# commands whose argument is a word, not a symbol: \mathrm{softmax}, \text{tokens}, \mathbb{R}
WORD_ARG = re.compile(r"\\(?:mathrm|text|operatorname|mathbb|mathbf|mathcal|textbf)\s*\{[^{}]*\}")
MATH = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$", re.S)
TOKEN = re.compile(r"(\\[A-Za-z]+|[A-Za-z])((?:\s*[\^_](?:\{[^{}]*\}|\\[A-Za-z]+|[A-Za-z0-9]))*)")
DECORATION = re.compile(r"([\^_])(\{[^{}]*\}|\\[A-Za-z]+|[A-Za-z0-9])")


def symbols(math: str) -> set[str]:
    """The symbols of a LaTeX fragment: a letter or Greek letter with its naming decorations.

    A superscript that is one capital letter (W^O) and a subscript that is a digit (W_1, b_{1,l})
    or a word (E_\\text{word}) belong to the name; index subscripts (x_l, P_i) and powers do not.
    """
    s = re.sub(r"_\\text\s*\{(\w+)\}", r"_{\1}", math)  # E_\text{word} -> E_{word}
    s = WORD_ARG.sub(" ", s)
    found = set()
    for m in TOKEN.finditer(s):
        base, decorations = m.group(1), m.group(2)
        if base.startswith("\\") and base[1:] not in GREEK:
            continue  # \frac, \sum, \dots, \top: not symbols
        sup = sub = ""
        for kind, written in DECORATION.findall(decorations):
            content = written.strip("{}").strip()
            if kind == "^" and re.fullmatch(r"[A-Z]", content):
                sup = content
            elif kind == "_" and re.match(r"\d", content):
                sub = content[0]
            elif kind == "_" and re.fullmatch(r"[a-z]{2,}", content):
                sub = content
        found.add(base + (f"^{sup}" if sup else "") + (f"_{sub}" if sub else ""))
    return found


def math_symbols(text: str) -> set[str]:
    return set().union(*(symbols(a or b) for a, b in MATH.findall(text)))


def equation_sections(path: Path) -> list[str]:
    """The text under each "## The equation" / "## The equations" heading, to the next heading."""
    found = []
    for cell in markdown_cells(path):
        for m in re.finditer(r"^## The equations?\s*$(.*?)(?=^#{1,6} |\Z)", cell, re.M | re.S):
            found.append(m.group(1))
    return found


def notation_symbols() -> set[str]:
    """Symbols in the first column of every table of docs/notation.md."""
    cells = [
        line.split("|")[1]
        for line in NOTATION.read_text().splitlines()
        if line.startswith("|") and not re.match(r"\|\s*-", line)
    ]
    return math_symbols("\n".join(cells))


def missing(text: str) -> set[str]:
    return math_symbols(text) - notation_symbols()


def test_symbol_extraction():
    assert symbols(r"\mathrm{LN}_2\big(h + m W_{2,l} + b^O_i\big) \odot \gamma^\top") == {
        "h",
        "m",
        "W_2",
        "b^O",
        "\\gamma",
    }
    assert symbols(r"E_\text{word}[w_t] + \mathbb{R}^{H \times d}") == {"E_word", "w", "H", "d"}


def test_notation_page_lists_the_layer():
    table = notation_symbols()
    layer = {
        "x",
        "a",
        "h",
        "m",
        "f",
        "y",
        "Q",
        "K",
        "V",
        "W^Q",
        "W^K",
        "W^V",
        "W^O",
        "W_1",
        "W_2",
        "b_1",
        "b_2",
        "\\gamma",
        "\\beta",
        "H",
        "A",
        "d",
        "B",
        "T",
        "L",
    }
    assert layer <= table, sorted(layer - table)


def test_equation_sections_exist():
    with_sections = [path for path in lessons() if equation_sections(path)]
    assert len(with_sections) >= 6, [p.name for p in with_sections]
    for path in with_sections:
        assert len(math_symbols("\n".join(equation_sections(path)))) >= 3, path.name


@pytest.mark.parametrize("path", [p for p in lessons() if equation_sections(p)], ids=lambda p: p.name)
def test_equation_symbols_are_on_the_notation_page(path: Path):
    absent = missing("\n".join(equation_sections(path)))
    assert not absent, f"{path.name} uses symbols docs/notation.md does not define: {sorted(absent)}"


def test_an_undefined_symbol_is_caught():
    assert missing(r"$$y = \Omega\, x + Z^Q_i$$") == {"\\Omega", "Z^Q"}


# -- where the page is announced ------------------------------------------------------------------


def test_first_lesson_and_faq_link_the_notation_page():
    assert "](../docs/notation.md)" in (ROOT / "lessons" / "01-anatomy.py").read_text()
    assert "](notation.md)" in FAQ.read_text()


@pytest.mark.parametrize("page", ["docs/notation.md", "docs/index.md"])
def test_measured_model_is_stated(page: str):
    text = " ".join((ROOT / page).read_text().split())
    assert re.search(r"[Ee]very number on this site is measured on \**all-MiniLM-L6-v2", text)


def test_the_layer_diagram_labels_each_add_and_norm_with_the_notation_pages_equation():
    """The home page's diagram writes the two Add & Norms as the notation page defines h and y
    (the second residual is h, the first Add & Norm's output, never the layer's input x)."""
    import re

    from tests.conftest import ROOT

    notation = (ROOT / "docs" / "notation.md").read_text()
    svg = (ROOT / "docs" / "assets" / "bertlayer.svg").read_text()
    subscript = {"1": "₁", "2": "₂"}
    defined = {
        f"{name} = LN{subscript[n]}({left} + {right})"
        for name, n, left, right in re.findall(r"\$(\w) = \\mathrm\{LN\}_(\d)\((\w) \+ (\w)\)\$", notation)
    }
    assert defined == {"h = LN₁(x + a)", "y = LN₂(h + f)"}, defined
    labels = set(re.findall(r'<text class="note"[^>]*>([^<]*LN[^<]*)</text>', svg))
    assert labels == defined, labels


# -- index conventions: indices count from 0, the heads are A, the segment is s ------------------

# (pattern, why); searched in the lessons, the docs pages and the solution notebooks (from which
# the exercises are generated), prose and code alike.
INDEX_RETIRED = [
    (r"\\sum_\{?[a-z]\s*=\s*1\b", "indices count from 0: a sum over the features runs from 0 to H - 1"),
    (r"\((?:B, )?(?:T, )?h, (?:T, )?[dT]\)", "the number of heads is A: (B, A, T, d), (B, T, A, d), (B, A, T, T)"),
    (r"\bhead h\b", "a head is i (h is the first Add & Norm's output)"),
    (r"\(1, P\)", "P_i is head i's probabilities: name the size, (1, max_position_embeddings)"),
]


def index_checked_files() -> list[Path]:
    return [*lessons(), *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "solutions").glob("*/*.ipynb"))]


def source_text(path: Path) -> str:
    if path.suffix != ".ipynb":
        return path.read_text()
    import json

    return "\n".join("".join(cell["source"]) for cell in json.loads(path.read_text())["cells"])


def index_mistakes(text: str) -> list[str]:
    return [f"{m.group(0)!r} ({why})" for pattern, why in INDEX_RETIRED for m in re.finditer(pattern, text)]


def test_index_conventions_are_searched_in_real_files():
    files = index_checked_files()
    assert sum(path.suffix == ".ipynb" for path in files) >= 6 and len(files) >= 20


@pytest.mark.parametrize("path", index_checked_files(), ids=lambda p: p.name)
def test_indices_follow_the_notation_page(path: Path):
    found = index_mistakes(source_text(path))
    assert not found, f"{path.name}: " + "; ".join(found)


def test_index_mistakes_are_caught():
    old = (
        r"$$\mu = \frac{1}{H}\sum_{k=1}^{H} z_k$$"
        "\n# (B, h, T, d) -> (B, T, h, d)\n# head h owns rows h*d .. (h+1)*d - 1.\n"
        "scores = (query @ key.transpose(-1, -2)) * scaling  # (B, h, T, T)\n"
        "position_ids = torch.arange(P)[None, :]  # (1, P)\n"
    )
    assert len(index_mistakes(old)) == 6
    assert not index_mistakes(
        r"$\sum_{k=0}^{H-1} z_k$, (B, A, T, d), (B, A, T, T), head i, (1, max_position_embeddings)"
    )


def notation_sections() -> dict[str, set[str]]:
    """The symbols of the first column of each table of docs/notation.md, by section heading."""
    found: dict[str, set[str]] = {}
    for section in re.split(r"^## ", NOTATION.read_text(), flags=re.M)[1:]:
        heading, _, body = section.partition("\n")
        rows = [
            line.split("|")[1] for line in body.splitlines() if line.startswith("|") and not re.match(r"\|\s*-", line)
        ]
        found[heading.strip()] = math_symbols("\n".join(rows))
    return found


def test_no_index_letter_also_names_an_embedding_quantity():
    # s was both a key position and the segment id s_t: an index letter of the page names nothing else
    sections = notation_sections()
    indices = sections["Sizes and indices"]
    embeddings = next(symbols for heading, symbols in sections.items() if heading.startswith("Embeddings"))
    assert {"t", "j", "H"} <= indices and {"s", "w"} <= embeddings
    assert not indices & embeddings, sorted(indices & embeddings)
