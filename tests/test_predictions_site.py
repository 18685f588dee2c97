"""The lessons' questions on the built site, and answered in a real browser.

On every built lesson page (the ``site`` fixture, ``tests/site_build.py``: built once per run), each question's
marked answer is the option the lesson's recorded numbers select, recomputed here apart from the
hook; no explanation writes a number in digits that its labels do not show, and every number an
explanation quotes is one a lesson records; across the course the right answers favour no
position (a learner who always picked the first would otherwise score without reading). In
headless Chromium, over http and from files: an answer stays hidden until the learner commits,
then shows with its computed numbers; a reload keeps it; the Progress page counts it, and forgets
it on reset.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from tests.conftest import ROOT
from tests.site_build import Reader

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("site")]

CLAIMS_SCRIPT = re.compile(r'<script type="application/vnd\.bertlab\.claims\+json">(.*?)</script>', re.S)
# {{ name }} or {{ 05-feed-forward: name }}, and {{ claim: ... }}
QUOTED = re.compile(r"\{\{\s*(claim\s*:\s*)?(?:(\d\d-[a-z0-9-]+)\s*:\s*)?([A-Za-z_][\w.]*)\s*\}\}")
DIGITS = re.compile(r"(?<![\w.^])\d+(?:\.\d+)?(?![\w])")
# Every lesson asks its questions.
WITH_QUESTIONS = tuple(p.stem for p in sorted((ROOT / "lessons").glob("[0-9][0-9]-*.py")))
LESSON = "01-anatomy"


def records(built: Path) -> dict[str, dict]:
    """Each lesson's published records, read from its built page."""
    found = {}
    for page in sorted((built / "lessons").glob("*/index.html")):
        script = CLAIMS_SCRIPT.search(page.read_text(encoding="utf-8"))
        if script:
            found[page.parent.name] = json.loads(script.group(1).replace("<\\/", "</"))
    return found


def selected(option: dict, lesson: dict) -> bool:
    """Whether the lesson's recorded numbers make ``option`` right (apart from the hook's code)."""
    when = option["when"]
    if "claim" in when:
        c = lesson["claims"][when["claim"]]
        ops = {"<": c["left"] < c["right"], "<=": c["left"] <= c["right"], ">": c["left"] > c["right"]}
        ops |= {">=": c["left"] >= c["right"], "==": c["left"] == c["right"], "!=": c["left"] != c["right"]}
        return ops[c["op"]] is when["holds"]
    x = lesson["values"][when["value"]]["value"]
    return (when["low"] is None or x >= when["low"]) and (when["high"] is None or x < when["high"])


def test_each_lesson_with_questions_asks_before_measuring_and_checks_at_the_end(site):
    recorded = records(site)
    for stem in WITH_QUESTIONS:
        kinds = [q["kind"] for q in recorded[stem].get("predictions", {}).values()]
        assert 2 <= kinds.count("predict") <= 4 and kinds.count("check") == 3, (stem, kinds)
    for stem, lesson in recorded.items():
        if lesson.get("predictions"):
            kinds = [q["kind"] for q in lesson["predictions"].values()]
            assert kinds.count("predict") >= 2 and kinds.count("check") == 3, (stem, kinds)


def test_the_marked_answer_is_the_one_the_recorded_numbers_select(site):
    recorded = records(site)
    forms = 0
    for stem, lesson in recorded.items():
        soup = BeautifulSoup((site / "lessons" / stem / "index.html").read_text(encoding="utf-8"), "html.parser")
        for form in soup.select("form.bertlab-predict"):
            forms += 1
            question = lesson["predictions"][form["data-name"]]
            right = [i for i, option in enumerate(question["options"]) if selected(option, lesson)]
            assert len(right) == 1, (stem, form["data-name"], right)
            assert form["data-right"] == str(right[0]), (stem, form["data-name"])
            # what the page reveals for the right option: its explanation, numbers filled in
            explain = form.select(".bertlab-predict__explain")[right[0]]
            assert "{{" not in explain.get_text()
            for found in QUOTED.finditer(question["options"][right[0]]["explain"]):
                if not found.group(1):
                    value = recorded[found.group(2) or stem]["values"][found.group(3)]
                    assert value["text"] in explain.get_text(), (stem, form["data-name"], value["text"])
        assert len(soup.select("form.bertlab-predict")) == len(lesson.get("predictions", {})), stem
    assert forms >= 3 * len(WITH_QUESTIONS)


def test_explanations_quote_only_numbers_a_lesson_records(site):
    recorded = records(site)
    quoted = 0
    for stem, lesson in recorded.items():
        for name, question in lesson.get("predictions", {}).items():
            labels = {n for option in question["options"] for n in DIGITS.findall(option["label"])}
            for text in [question["question"], *(option["explain"] for option in question["options"])]:
                for found in QUOTED.finditer(text):
                    kind = "claims" if found.group(1) else "values"
                    assert found.group(3) in recorded[found.group(2) or stem][kind], (stem, name, found.group(0))
                    quoted += 1
                typed = [n for n in DIGITS.findall(QUOTED.sub(" ", text)) if n not in labels]
                assert typed == [], f"{stem}: {name} writes {typed} in digits: quote recorded numbers"
    assert quoted >= len(WITH_QUESTIONS), "no explanation quotes a recorded number"


def test_the_right_answers_favour_no_position(site):
    recorded = records(site)
    by_count: dict[str, list[int]] = {"two": [], "more": []}
    for stem, lesson in recorded.items():
        for name, question in lesson.get("predictions", {}).items():
            right = [i for i, option in enumerate(question["options"]) if selected(option, lesson)]
            assert len(right) == 1, (stem, name)
            by_count["two" if len(question["options"]) == 2 else "more"].append(right[0])
    two, more = by_count["two"], by_count["more"]
    assert len(more) >= 10, f"only {len(more)} questions offer three options or more"
    assert 0.4 <= two.count(0) / len(two) <= 0.6, f"the first of two options is right in {two.count(0)} of {len(two)}"
    shares = {i: more.count(i) / len(more) for i in set(more)}
    assert max(shares.values()) <= 0.4, f"right positions among three or more options: {sorted(shares.items())}"
    everything = two + more
    assert everything.count(0) / len(everything) <= 0.5, f"the first option is right in {everything.count(0)}"


# -- in the browser ---------------------------------------------------------------------------


def _question(built: Path) -> tuple[str, dict, dict]:
    """The lesson's first prediction: its name, its record, and the lesson's records."""
    lesson = records(built)[LESSON]
    name, question = next((n, q) for n, q in sorted(lesson["predictions"].items()) if q["kind"] == "predict")
    return name, question, lesson


def _answer_and_check(page, name: str, question: dict, lesson: dict, pick: int) -> None:
    form = page.locator(f"form#predict-{name}")
    right = int(form.get_attribute("data-right"))
    assert not form.locator(".bertlab-predict__answer").is_visible()
    assert not form.locator(".bertlab-predict__explain").first.is_visible()
    form.locator("button[type=submit]").click()  # nothing picked yet
    assert "Pick an option" in form.locator(".bertlab-predict__status").inner_text()
    assert not form.locator(".bertlab-predict__answer").is_visible()
    form.locator(f"input[value='{pick}']").check()
    form.locator("button[type=submit]").click()
    _shows_answer(page, name, question, lesson, pick, right)


def _shows_answer(page, name: str, question: dict, lesson: dict, pick: int, right: int) -> None:
    form = page.locator(f"form#predict-{name}")
    form.locator(".bertlab-predict__answer").wait_for(state="visible")
    verdict = form.locator(".bertlab-predict__verdict").inner_text()
    assert question["options"][right]["label"] in verdict
    assert ("Right" in verdict) is (pick == right)
    assert form.locator(f"input[value='{pick}']").is_checked()
    assert form.locator("input:disabled").count() == len(question["options"])
    assert not form.locator("button[type=submit]").is_visible(), "committed: no second answer"
    explain = form.locator(".bertlab-predict__explain").nth(right)
    assert explain.is_visible()
    numbers = [lesson["values"][m.group(3)]["text"] for m in QUOTED.finditer(question["options"][right]["explain"])]
    assert numbers, f"{name}: the right option's explanation quotes no recorded number"
    for text in numbers:
        assert text in explain.inner_text()


def _progress_row(page, lesson: str) -> list[str]:
    page.locator(f"#bertlab-answers tr[data-lesson='{lesson}']").wait_for()
    return page.locator(f"#bertlab-answers tr[data-lesson='{lesson}'] td").all_inner_texts()


def test_an_answer_is_revealed_kept_and_counted_over_http(browser, base_url, site):
    name, question, lesson = _question(site)
    predicts = sum(q["kind"] == "predict" for q in lesson["predictions"].values())
    context = browser.new_context()
    reader = Reader(context, base_url)
    page = reader.visit(f"lessons/{LESSON}/")
    right = int(page.locator(f"form#predict-{name}").get_attribute("data-right"))
    wrong = (right + 1) % len(question["options"])
    _answer_and_check(page, name, question, lesson, wrong)

    page.reload()
    _shows_answer(page, name, question, lesson, wrong, right)  # kept, unchanged

    page = reader.visit("progress/")
    row = _progress_row(page, LESSON)
    assert row[1:] == [f"1 of {predicts}", "0 of 3", "0 of 1"], row
    page.get_by_role("button", name="Forget my answers").click()
    assert _progress_row(page, LESSON)[1:] == [f"0 of {predicts}", "0 of 3", "-"]
    page = reader.visit(f"lessons/{LESSON}/")
    assert not page.locator(f"form#predict-{name} .bertlab-predict__answer").is_visible()
    assert reader.problems == []
    context.close()


def test_the_questions_and_the_record_work_from_files(browser, site):
    name, question, lesson = _question(site)
    context = browser.new_context()
    leaving: list[str] = []

    def route(r):
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            leaving.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto((site / "lessons" / LESSON / "index.html").as_uri())
    right = int(page.locator(f"form#predict-{name}").get_attribute("data-right"))
    _answer_and_check(page, name, question, lesson, right)
    page.reload()
    _shows_answer(page, name, question, lesson, right, right)

    page.goto((site / "progress" / "index.html").as_uri())
    row = _progress_row(page, LESSON)
    assert row[1].startswith("1 of ") and row[3] == "1 of 1", row
    link = page.locator(f"#bertlab-answers tr[data-lesson='{LESSON}'] a").get_attribute("href")
    assert link.startswith("file://") and link.endswith(f"lessons/{LESSON}/index.html")
    # Material's search cannot load its index from files (a worker script): the one error allowed.
    errors = [e for e in errors if "search/search_index.js" not in e]
    assert errors == [] and leaving == [], (errors, leaving)
    context.close()


def test_the_recomputed_selection_refuses_values_outside_an_options_range():
    """The test's own selection, apart from the hook's, can say no: the checks above can fail."""
    option = {"when": {"value": "x", "low": 0.6, "high": 0.7}}
    assert selected(option, {"values": {"x": {"value": 0.65}}})
    assert not selected(option, {"values": {"x": {"value": 0.7}}})
    assert not selected(option, {"values": {"x": {"value": math.nan}}})
