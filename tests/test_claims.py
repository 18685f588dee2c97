"""Every sentence true to its number: the claims the prose makes, checked by the build and here.

Lessons record the numbers their prose quotes and the comparisons it makes
(``bertlab.experiments.claims``); the site build fills the numbers in and fails on a claim that
does not hold (``docs/hooks/claims.py``). These tests read the built site (built once per run by
the "site" group) and the course's prose:

- every claim recorded on a built page holds, and no placeholder is left unfilled;
- a planted contradicted claim, or a mark naming no claim, fails the build's hook in strict mode
  (``make test``); in a learner's build the contradicted claim's sentence is flagged instead;
- every recorded claim is marked in some sentence, so none is checked without being said;
- every comparative sentence of the lessons, the FAQ and the guides carries a claim mark or names
  its paper, but for those listed in ``unclaimed_comparisons.txt``: a new one fails.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from bertlab.experiments import claims
from tests.claims_sweep import claims_hook as hook
from tests.comparisons import CLAIM, sources, unclaimed
from tests.conftest import ROOT
from tests.docs_hooks import load_hook

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("site")]
BASELINE = ROOT / "tests" / "unclaimed_comparisons.txt"


def lesson_pages(built: Path) -> dict[str, str]:
    return {p.parent.name: p.read_text(encoding="utf-8") for p in sorted((built / "lessons").glob("*/index.html"))}


def test_every_recorded_claim_holds_on_the_built_pages(site):
    claims_hook = hook()
    recorded = {stem: claims_hook.read(page) for stem, page in lesson_pages(site).items()}
    recorded = {stem: r for stem, r in recorded.items() if r}
    assert sum(len(r["claims"]) for r in recorded.values()) >= 20, "too few claims recorded: is publish() run?"
    problems = [p for stem, r in recorded.items() for p in claims_hook.contradicted(stem, r)]
    assert problems == []


def test_no_placeholder_is_left_on_the_site(site):
    claims_hook = hook()
    left = [
        f"{page.relative_to(site)}: {placeholder}"
        for page in site.rglob("*.html")
        for placeholder in claims_hook.unfilled(page.read_text(encoding="utf-8"))
    ]
    assert left == []
    marks = sum(page.read_text(encoding="utf-8").count('class="claim"') for page in site.rglob("*.html"))
    said = sum(len(CLAIM.findall(path.read_text())) for path in sources())
    assert marks >= said > 0, (marks, said)  # every mark in the prose became a checked mark


def test_no_placeholder_is_written_as_code():
    """The build leaves placeholders in code alone (they are examples there): in prose, no backticks."""
    quoted = [
        f"{path.relative_to(ROOT)}: {found.group(0)}"
        for path in sources()
        for found in re.finditer(r"`[^`\n]*\{\{[^`\n]*`", path.read_text())
    ]
    assert quoted == []


def _page(src_uri: str):
    return SimpleNamespace(file=SimpleNamespace(src_uri=src_uri), content="")


def planted(page_html: str) -> tuple[str, str]:
    """``page_html`` with one more claim, the negation of its first: the name and the new page."""
    claims_hook = hook()
    records = claims_hook.read(page_html)
    name, true_claim = next(iter(sorted(records["claims"].items())))
    negation = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
    records["claims"]["planted"] = {**true_claim, "op": negation[true_claim["op"]], "says": "the opposite of " + name}
    script = f'<script type="{claims.SCRIPT_TYPE}">' + json.dumps(records) + "</script>"
    return name, load_hook("lesson_records").SCRIPT.sub(lambda _: script, page_html)


def test_a_planted_contradicted_claim_fails_the_strict_build(site, monkeypatch):
    from mkdocs.exceptions import PluginError

    monkeypatch.setenv("BERTLAB_CLAIMS", "strict")
    claims_hook = hook()
    page_html = lesson_pages(site)["08-residual-connections"]
    claims_hook.on_page_content(page_html, _page("lessons/08-residual-connections.py"), None, None)  # as built: passes
    _, wrong = planted(page_html)
    with pytest.raises(PluginError, match="planted"):
        claims_hook.on_page_content(wrong, _page("lessons/08-residual-connections.py"), None, None)


def test_a_learners_build_marks_a_claim_that_does_not_hold_and_goes_on(site, monkeypatch, capsys):
    """Lenient (``make start``, ``make site``): the page is built, its sentence flagged, one warning line."""
    monkeypatch.delenv("BERTLAB_CLAIMS", raising=False)
    claims_hook = hook()
    claims_hook.on_config(None)
    _, wrong = planted(lesson_pages(site)["08-residual-connections"])
    claims_hook.on_page_content(wrong, _page("lessons/08-residual-connections.py"), None, None)
    page = _page("lessons/08-residual-connections.py")
    page.content = (
        "<p>The opposite holds {{ claim: planted }}; this one holds {{ claim: skip_not_worse_everywhere }}.</p>"
    )
    claims_hook.on_page_context({}, page, None, None)
    assert re.search(r'class="claim claim-fails"[^>]*>\(does not hold on this machine: [^<]* is false\)<', page.content)
    assert page.content.count('class="claim"') == 1  # the claim that holds keeps its check mark
    claims_hook.on_post_build(None)
    warning = capsys.readouterr().err.strip().splitlines()
    assert len(warning) == 1 and "08-residual-connections: planted" in warning[0], warning
    assert "skip_not_worse_everywhere" not in warning[0]


def test_a_mark_naming_no_claim_fails_the_build(site):
    from mkdocs.exceptions import PluginError

    claims_hook = hook()
    claims_hook.on_page_content(
        lesson_pages(site)["08-residual-connections"], _page("lessons/08-residual-connections.py"), None, None
    )
    page = _page("faq.md")
    page.content = "<p>Removing a skip is worse {{ claim: 08-residual-connections: never_recorded }}.</p>"
    with pytest.raises(PluginError, match="never_recorded"):
        claims_hook.on_page_context({}, page, None, None)


def test_every_recorded_claim_is_said_in_a_sentence(site):
    claims_hook = hook()
    text = {path.stem: path.read_text() for path in sources()}
    marked = set()
    for stem, body in text.items():
        for found in claims_hook.PLACEHOLDER.finditer(body):
            if found.group(1):
                marked.add((found.group(2) or stem, found.group(3)))
    recorded = {
        (stem, name)
        for stem, page in lesson_pages(site).items()
        for name in (claims_hook.read(page) or {"claims": {}})["claims"]
    }
    assert sorted(recorded - marked) == [], "claims checked by the build but said in no sentence"


def test_a_claim_that_does_not_hold_fails_the_lesson_in_strict_mode(monkeypatch):
    monkeypatch.setenv("BERTLAB_CLAIMS", "strict")
    with pytest.raises(claims.ClaimError, match="slower"):
        claims.claim("slower", 2.0, "<", 1.0, "two is less than one")


def test_a_claim_that_does_not_hold_is_recorded_as_such_in_a_learners_build(monkeypatch):
    monkeypatch.delenv("BERTLAB_CLAIMS", raising=False)
    assert claims.claim("slower_lenient", 2.0, "<", 1.0, "two is less than one") is False
    assert claims.records()["claims"]["slower_lenient"]["left"] == 2.0
    assert not claims.holds(claims.records()["claims"]["slower_lenient"])


@pytest.mark.parametrize(
    ("left", "op", "right", "expected"),
    [
        (1.0, "<", 1.3, 1.3),  # a holding claim: how many times over
        (3.0, ">", 2.0, 1.5),
        (-2.0, "<", -1.0, 2.0),  # both negative: the ratio of sizes
        (1.3, "<", 1.0, 1 / 1.3),  # one that does not hold: below 1
        (-0.5, "<", 0.0, float("inf")),  # a sign claim has no ratio
        (0.5, "<", 0.0, 0.0),
        (float("nan"), "<", 1.0, 0.0),
        (2.0, "==", 2.0, None),  # exact claims have none
    ],
)
def test_margin_is_the_ratio_of_the_sides_in_the_claimed_direction(left, op, right, expected):
    got = claims.margin({"left": left, "op": op, "right": right})
    assert got == pytest.approx(expected) if expected is not None else got is None


def test_comparative_sentences_carry_a_claim_or_are_listed():
    """A new comparison in the prose must be a registered claim (or cite its paper)."""
    found = unclaimed()
    listed = [line for line in BASELINE.read_text().splitlines() if line and not line.startswith("#")]
    new = [s for s in found if s not in listed]
    gone = [s for s in listed if s not in found]
    print(f"{len(found)} comparative sentences carry no registered claim yet (listed in {BASELINE.name})")
    assert new == [], (
        "comparative sentences with no {{ claim: ... }} mark: register a claim in the lesson "
        "and mark the sentence, or cite the paper:\n" + "\n".join(new)
    )
    assert gone == [], f"no longer in the prose (remove them from {BASELINE.name}):\n" + "\n".join(gone)


def test_the_contributor_page_lists_every_claim_with_its_margin_and_setup_the_conditions(site):
    """Both tables come from the recorded margins (tests/claim_margins.json), not typed by hand."""
    recorded = json.loads((ROOT / "tests" / "claim_margins.json").read_text())
    page = (site / "how-it-is-built" / "index.html").read_text(encoding="utf-8")
    missing = [key for key in recorded["claims"] if f"<code>{key}</code>" not in page]
    assert missing == [] and "<!-- claim margins -->" not in page
    setup = (site / "setup" / "index.html").read_text(encoding="utf-8")
    assert (
        all(f"<code>{c}</code>" in setup for c in recorded["conditions"]) and "<!-- claim conditions -->" not in setup
    )
