"""The lessons' questions: the build selects each right answer from the lesson's recorded numbers.

These tests drive ``docs/hooks/predictions.py`` and ``bertlab.experiments.predictions`` on made-up
records (no site is built): an option is right when its recorded value lies in its range or its
claim holds (or fails) as it says; an explanation that writes a number in digits, a placeholder
naming no question, a question never placed or a section that does not exist fail the build;
numbers that select no single answer fail the strict build but only mark the question elsewhere;
a prediction the page answers above it fails the build; and right answers that favour a position
across the course fail the strict build.
``tests/test_predictions_site.py`` checks the built site and the page in a real browser.
"""

from __future__ import annotations

import json

import pytest

from bertlab import notebook_guesses
from bertlab.experiments import claims, predictions
from tests.conftest import ROOT
from tests.docs_hooks import load_hook


def hook():
    return load_hook("predictions")


@pytest.fixture
def recorded(monkeypatch):
    """A fresh record of values, claims and questions, as one lesson's run leaves them."""
    for store in ("_values", "_claims", "_predictions"):
        monkeypatch.setattr(claims, store, {})
    monkeypatch.setenv("BERTLAB_CLAIMS", "lenient")
    return claims


def share_question(section: str = "Parameter census") -> None:
    predictions.predict(
        "share",
        "What share is it?",
        [
            predictions.between("share", None, 0.5, "below 0.5", "That would hold if it were small."),
            predictions.between("share", 0.5, 0.7, "0.5 to 0.7", "It is {{ share }}."),
            predictions.between("share", 0.7, None, "0.7 or more", "That would hold if it were large."),
        ],
        section=section,
    )


def page(records: dict, prose: str, headings=("Parameter census",)) -> str:
    """A lesson page as the build sees it: headings, prose and the published script."""
    from bertlab.progress import heading_id

    text = json.dumps(records).replace("</", "<\\/")
    heads = "".join(f'<h2 id="{heading_id(h)}">{h}</h2>' for h in headings)
    return (
        f"{heads}{prose}"
        '<div class="jp-Cell jp-CodeCell jp-Notebook-cell" id="cell-id=abc">measured</div>'
        f'<script type="application/vnd.bertlab.claims+json">{text}</script>'
    )


@pytest.mark.parametrize(("share", "right"), [(0.1, 0), (0.5, 1), (0.6658, 1), (0.7, 2), (3.0, 2)])
def test_the_recorded_value_selects_the_option_whose_range_holds_it(recorded, share, right):
    recorded.value("share", share)
    share_question()
    records = recorded.records()
    assert hook().right_options(records["predictions"]["share"], records) == [right]


def test_a_claim_selects_the_option_keyed_to_its_truth(recorded):
    recorded.value("a", 1.0)
    predictions.check(
        "which",
        "Is a small?",
        [
            predictions.holds("a_small", "yes", "It is: {{ claim: a_small }}."),
            predictions.fails("a_small", "no", "That would hold if a were large."),
        ],
        section="Parameter census",
    )
    h = hook()
    recorded.claim("a_small", "a", "<", 2, "a is small")
    records = recorded.records()
    assert h.right_options(records["predictions"]["which"], records) == [0]
    recorded.claim("a_small", "a", ">", 2, "a is small")  # the same sentence, on a machine where it fails
    records = recorded.records()
    assert h.right_options(records["predictions"]["which"], records) == [1]


def test_the_page_shows_a_form_with_the_selected_answer_hidden_until_committed(recorded):
    recorded.value("share", 0.66)
    share_question()
    html, problems, unsettled = hook().render(page(recorded.records(), "<p>{{ predict: share }}</p>"), "01-anatomy")
    assert problems == [] and unsettled == []
    assert '<form class="bertlab-predict bertlab-predict--predict"' in html and 'data-right="1"' in html
    assert "{{ predict" not in html
    assert html.count('class="bertlab-predict__explain" hidden') == 3
    assert '<div class="bertlab-predict__answer" hidden>' in html
    assert 'href="#cell-id=abc"' in html  # the measurement: the code cell that follows
    assert "It is {{ share }}." in html  # filled by the claims hook, like any prose
    script = html[html.index("<script") :]
    assert "{{" not in script, "the claims hook would fill the published script's placeholders"
    assert hook().read(html)["predictions"]["share"]["options"][1]["explain"] == "It is {{ share }}."


@pytest.mark.parametrize(
    ("explain", "stray"),
    [
        ("It is 0.66 of a layer.", ["0.66"]),
        ("About 2 in 3.", ["2", "3"]),
        ("It is {{ share }}, between 0.5 and 0.7.", []),  # the labels' numbers
        ("$W_1$ holds $8H^2$ entries in float32, {{ share }}.", []),  # names and exponents
    ],
)
def test_a_number_written_in_digits_is_refused_unless_a_label_shows_it(recorded, explain, stray):
    recorded.value("share", 0.66)
    share_question()
    question = recorded.records()["predictions"]["share"]
    question["options"][1]["explain"] = explain
    assert hook().stray_numbers(question) == stray


def test_the_build_names_each_mistake_in_a_lessons_questions(recorded):
    recorded.value("share", 0.66)
    share_question(section="No such section")
    predictions.predict(
        "unplaced",
        "Never placed?",
        [predictions.holds("x", "yes", "Yes."), predictions.fails("x", "no", "No.")],
        section="Parameter census",
    )
    records = recorded.records()
    records["predictions"]["share"]["options"][0]["explain"] = "Below 0.42."
    prose = "<p>{{ predict: share }}</p><p>{{ predict: nowhere }}</p>"
    _, problems, _ = hook().render(page(records, prose), "01-anatomy")
    text = "\n".join(problems)
    assert "{{ predict: nowhere }} names no question" in text
    assert "unplaced is declared and never placed" in text
    assert "numbers written in digits (0.42)" in text
    assert "no section of the lesson has the heading 'No such section'" in text


def test_numbers_that_select_no_single_answer_fail_the_strict_build_and_mark_a_learners_page(recorded, monkeypatch):
    recorded.value("share", 0.66)
    recorded.value("other", 5.0)
    predictions.predict(
        "share",
        "What share?",
        [
            predictions.between("share", None, 0.5, "below 0.5", "Small."),
            predictions.between("other", None, 1, "other below 1", "Other."),
        ],
        section="Parameter census",
    )
    h = hook()
    html, problems, unsettled = h.render(page(recorded.records(), "<p>{{ predict: share }}</p>"), "01-anatomy")
    assert problems == [] and unsettled == ["share (options none right)"]
    assert 'data-right=""' in html and "do not select a single answer" in html

    class Page:
        file = type("F", (), {"src_uri": "lessons/01-anatomy.py"})()
        title = "Lesson 1"
        url = "lessons/01-anatomy/"

    h.on_config({})
    assert "bertlab-predict__unsettled" in h.on_page_content(
        page(recorded.records(), "{{ predict: share }}"), Page(), {}, None
    )
    monkeypatch.setenv("BERTLAB_CLAIMS", "strict")
    with pytest.raises(Exception, match="select no single answer"):
        h.on_page_content(page(recorded.records(), "{{ predict: share }}"), Page(), {}, None)


def test_a_question_needs_options_with_distinct_labels_and_explanations(recorded):
    with pytest.raises(ValueError, match="at least two"):
        predictions.predict("q", "?", [predictions.holds("c", "yes", "Yes.")], section="S")
    with pytest.raises(ValueError, match="share a label"):
        predictions.check("q", "?", [predictions.holds("c", "a", "A."), predictions.fails("c", "a", "B.")], section="S")
    with pytest.raises(ValueError, match="explanation"):
        predictions.holds("c", "yes", " ")
    with pytest.raises(ValueError, match="empty range"):
        predictions.between("v", 1, 1, "one", "One.")


@pytest.mark.parametrize(
    ("above", "answered"),
    [
        ("<p>The share is {{ share }}.</p>", "{{ share }}"),  # the deciding value, quoted
        ("<p>It is small {{ claim: share_small }}.</p>", "{{ claim: share_small }}"),  # the deciding claim
        ("<p>It is small {{ claim: 01-anatomy: share_small }}.</p>", "{{ claim: 01-anatomy: share_small }}"),
        ('<pre class="output">share 0.66581 of a layer</pre>', "share's number 0.666"),  # printed, finer
        ("<p>Lesson 5 quotes {{ 05-feed-forward: share }}.</p>", None),  # another lesson's value
        ("<p>It has {{ other }} parts {{ claim: other_small }}.</p>", None),  # what does not decide it
        ('<pre class="output">share 0.665 of a layer</pre>', None),  # another number
        ("<p>A third of it.</p>", None),
    ],
)
def test_a_prediction_the_page_answers_above_it_fails_the_build(recorded, above, answered):
    recorded.value("share", 0.66581)
    recorded.value("other", 3)
    recorded.claim("share_small", "share", "<", 0.7, "the share is below 0.7")
    recorded.claim("other_small", "other", "<", 4, "other is small")
    share_question()
    predictions.predict(
        "small",
        "Is it small?",
        [predictions.fails("share_small", "no", "It is not."), predictions.holds("share_small", "yes", "It is.")],
        section="Parameter census",
    )
    prose = f"{above}<p>{{{{ predict: share }}}}</p><p>{{{{ predict: small }}}}</p>"
    _, problems, _ = hook().render(page(recorded.records(), prose), "01-anatomy")
    found = [p for p in problems if "answers it above the question" in p]
    assert found == ([] if answered is None else [found[0]]) and (answered is None or answered in found[0]), problems


def test_the_same_sentence_below_a_prediction_or_above_a_check_is_allowed(recorded):
    recorded.value("share", 0.66581)
    recorded.claim("share_small", "share", "<", 0.7, "the share is below 0.7")
    share_question()
    predictions.check(
        "check_small",
        "Is it small?",
        [predictions.fails("share_small", "no", "It is not."), predictions.holds("share_small", "yes", "It is.")],
        section="Parameter census",
    )
    prose = (
        "<p>{{ predict: share }}</p><p>It is {{ share }} {{ claim: share_small }}.</p><p>{{ predict: check_small }}</p>"
    )
    _, problems, _ = hook().render(page(recorded.records(), prose), "01-anatomy")
    assert problems == []


@pytest.mark.parametrize(
    ("positions", "favoured"),
    [
        ([(0, 2)] * 9 + [(1, 2)], ["option 1 is right in 9 of 10"]),  # the first of two, nine times in ten
        ([(0, 2)] * 5 + [(1, 2)] * 5, []),
        ([(0, 2)] * 6 + [(1, 2)] * 4, []),  # 60%: the most allowed
        ([(2, 3)] * 3 + [(0, 3), (1, 4)], ["option 3 is right in 3 of 5"]),
        ([(2, 3)] * 2 + [(0, 3), (1, 4), (3, 4)], []),
        ([(0, 3)] * 4, []),  # too few questions to judge
    ],
)
def test_right_answers_that_favour_a_position_are_named(positions, favoured):
    problems = hook().position_spread(positions)
    assert len(problems) == len(favoured) and all(f in p for f, p in zip(favoured, problems, strict=True)), problems


def test_the_strict_build_fails_when_the_course_favours_a_position(recorded, monkeypatch):
    h = hook()
    h.on_config({})
    h._positions.update({"01-anatomy": [(0, 2)] * 8, "02-embeddings": [(1, 2)] * 2})
    h.on_post_build({})  # lenient: a learner's build is not stopped
    monkeypatch.setenv("BERTLAB_CLAIMS", "strict")
    with pytest.raises(Exception, match="option 1 is right in 8 of 10"):
        h.on_post_build({})
    h._positions["02-embeddings"] = [(1, 2)] * 6
    h.on_post_build({})


# -- notebook 07: a guess before the checks, its answer from the learner's own numbers -------------


def test_notebook_seven_asks_for_a_guess_before_each_why_check_and_reveals_it_after():
    import nbformat

    for folder in ("solutions", "exercises"):
        nb = nbformat.read(ROOT / folder / "07-why-measured" / "07-why-measured.ipynb", as_version=4)
        ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
        for task, first_check in (("7_3", "test-7-3-values"), ("7_5", "test-7-5-values")):
            at = next(i for i, c in enumerate(nb.cells) if f"GUESS_{task} = None" in c.source)
            assert at < ids.index(first_check), (folder, task)
            assert "nbgrader" not in nb.cells[at].metadata, "a guess cell is the learner's: ungraded, editable"
            reveal_cell = nb.cells[ids.index("predictions")]
            assert ids.index("predictions") > ids.index("plot") and f"reveal(GUESS_{task}" in reveal_cell.source


def test_a_guess_is_shown_and_revealed_against_the_measured_option(capsys):
    options = {"a": "falls", "b": "stays"}
    assert notebook_guesses.guess("What happens?", options, None) is None
    assert "Write your letter" in capsys.readouterr().out
    assert notebook_guesses.guess("What happens?", options, "a") == "a"
    assert "Your prediction: 'a'" in capsys.readouterr().out
    assert notebook_guesses.reveal("a", options, "a", "r ends at 1e-7", "lesson 8") is True
    assert "right" in capsys.readouterr().out
    assert notebook_guesses.reveal("b", options, "a", "r ends at 1e-7", "lesson 8, Attention alone") is False
    out = capsys.readouterr().out
    assert "r ends at 1e-7, so 'a', falls" in out and "Reread lesson 8, Attention alone" in out


def test_notebook_seven_places_its_right_guesses_at_different_letters_among_three(model, batch):
    """The reveal cell, run on the course's own measurements (what right code measures), selects
    each guess's right letter: each question offers three options, the right ones are at
    different letters, and none is the first, which a learner who always picks "a" would get."""
    import nbformat
    import torch

    from bertlab.checks.why_measured import LesionTask
    from bertlab.experiments import rank_collapse

    nb = nbformat.read(ROOT / "solutions" / "07-why-measured" / "07-why-measured.ipynb", as_version=4)
    namespace: dict = {"torch": torch, "reveal": lambda *args: None}
    for cell in nb.cells:
        if cell.cell_type == "code" and "GUESS_7_" in cell.source and "guess(" in cell.source:
            exec(
                cell.source.replace("from bertlab.notebook_guesses import guess, reveal", ""),
                {**namespace, "guess": lambda q, o, c: c},
                namespace,
            )
    namespace["curves"] = rank_collapse.curves(model, batch)
    namespace["effects"] = LesionTask().reference_result(model, batch)
    reveal_cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "predictions")
    exec(reveal_cell.source, namespace)
    right = {task: namespace[f"measured_{task}"] for task in ("7_3", "7_5")}
    for task, letter in right.items():
        assert len(namespace[f"OPTIONS_{task}"]) >= 3 and letter in namespace[f"OPTIONS_{task}"], task
    assert len(set(right.values())) == len(right) and "a" not in right.values(), right


def test_the_guess_cells_import_nothing_a_graded_notebook_may_not():
    """The judge refuses a notebook that imports the grader's code: the guess cells' import must
    pass that scan, or every grade of notebook 07 would be lost as tampering."""
    import nbformat

    from bertlab.grading import tamper

    for kind in ("solutions", "exercises"):
        nb = nbformat.read(ROOT / kind / "07-why-measured" / "07-why-measured.ipynb", as_version=4)
        guessing = [c for c in nb.cells if c.cell_type == "code" and "notebook_guesses" in c.source]
        assert guessing, f"{kind}: no cell imports the guesses"
        assert tamper.scan(nb) is None, kind
