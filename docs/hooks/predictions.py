"""A lesson's predictions and "Check yourself" questions, answered by the lesson's own numbers.

A lesson declares each question with ``bertlab.experiments.predictions`` (``predict`` before a
measurement, ``check`` at its end) and places it in the prose as ``{{ predict: name }}``. The
declarations reach the page in the lesson's claims script. This hook:

- selects the right option from the values and claims the lesson recorded on this machine (an
  option is right when its recorded value lies in its range, or when its claim holds, or does not
  hold, as it says): exactly one must be; otherwise the strict build fails, and a learner's build
  shows the question with a note that this machine's numbers select no single answer;
- refuses a number written as digits in an explanation that is not in an option's label: an
  explanation quotes numbers as ``{{ name }}`` placeholders, which the claims hook fills;
- refuses a prediction the page answers above it: a ``{{ claim: name }}`` or ``{{ name }}`` of a
  claim or value that selects its answer placed before the question, or such a value's number,
  as rendered (three digits or more), printed by a cell above it;
- replaces each placeholder with a form: the learner picks an option and commits, and only then
  the page (``assets/predictions.js``) shows every option's explanation, the right one marked, and
  a link to the measurement (a prediction) or to the section to reread (a "Check yourself");
- gives the Progress page the list of every lesson's questions, so it can count the answers the
  browser kept (``assets/progress.js``);
- fails the strict build when the right answers favour a position across the course (the options
  show in the order the lesson declares them, so a page reads the same on every build): a learner
  who always picked the first would otherwise score without reading.

A placeholder naming no declared question, or a question declared and never placed, fails the
build. The hook must not import the course (as ``claims.py``).
"""

from __future__ import annotations

import html
import json
import math
import re
import sys

from mkdocs.exceptions import PluginError

from lesson_records import SCRIPT, holds, lesson_stem, read, strict

# {{ predict: name }}, alone in its paragraph (the usual case) or in a line of prose
PLACEHOLDER = re.compile(r"(?:<p>\s*)?\{\{\s*predict\s*:\s*([A-Za-z_][\w.]*)\s*\}\}(?:\s*</p>)?")
# The first code cell after a prediction: the measurement the revealed answer points to.
CODE_CELL = re.compile(r'<div class="jp-Cell jp-CodeCell jp-Notebook-cell" id="([^"]+)"')
# A number written in digits: not part of a name (W_1, LN_2, float32) nor of a placeholder.
NUMBER = re.compile(r"(?<![\w.^])\d+(?:\.\d+)?(?![\w])")
CLAIM_PLACEHOLDER = re.compile(r"\{\{[^}]*\}\}")
# A value or claim placeholder of the claims hook: {{ name }}, {{ claim: name }}, with a lesson or not.
QUOTE = re.compile(r"\{\{\s*(claim\s*:\s*)?(?:(\d\d-[a-z0-9-]+)\s*:\s*)?([A-Za-z_][\w.]*)\s*\}\}")
# What a reader does not see: scripts, styles, tags.
HIDDEN = re.compile(r"<(script|style)\b.*?</\1>|<[^>]+>", re.S)
# A rendered number: 0.9957, 1.2e-07, 66.6 (of 66.6%), -3
RENDERED = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w])")
INDEX_ID = "bertlab-answers-index"
PROGRESS_PAGE = "progress.md"
TITLES = {"predict": "Predict, then read on", "check": "Check yourself"}

_index: dict[str, dict] = {}  # lesson stem -> {"title", "url", "questions": {name: kind}}
_unsettled: list[str] = []  # "stem: name" of questions this machine's numbers do not settle
_positions: dict[str, list[tuple[int, int]]] = {}  # lesson stem -> (right option, options) per question
# Across the course, no position may hold more than this share of the right answers, among the
# questions of two options and among those of more (a group of fewer questions is not judged).
MOST_RIGHT = {"two options": 0.6, "three or more options": 0.4}
FEWEST_JUDGED = 5


def is_right(when: dict, records: dict) -> bool:
    """Whether an option's condition holds for a lesson's ``records``; KeyError names what is missing."""
    if "claim" in when:
        claim = records.get("claims", {}).get(when["claim"])
        if claim is None:
            raise KeyError(f"claim {when['claim']!r}")
        return holds(claim) == when["holds"]
    value = records.get("values", {}).get(when["value"])
    if value is None or value["value"] is None:
        raise KeyError(f"value {when['value']!r} (a number)")
    x = value["value"]
    low = -math.inf if when["low"] is None else when["low"]
    high = math.inf if when["high"] is None else when["high"]
    return low <= x < high


def right_options(question: dict, records: dict) -> list[int]:
    """The indices of the options this lesson's recorded numbers select (one, when all is well)."""
    return [i for i, option in enumerate(question["options"]) if is_right(option["when"], records)]


def stray_numbers(question: dict) -> list[str]:
    """Numbers written in digits in the explanations (and question) that no option's label shows.

    A number an explanation quotes must come from the build, as a ``{{ name }}`` placeholder.
    """
    allowed = {n for option in question["options"] for n in NUMBER.findall(option["label"])}
    texts = [question["question"], *(option["explain"] for option in question["options"])]
    return [n for text in texts for n in NUMBER.findall(CLAIM_PLACEHOLDER.sub(" ", text)) if n not in allowed]


def deciders(question: dict) -> tuple[set[str], set[str]]:
    """The values and the claims whose recorded numbers select a question's answer."""
    values = {o["when"]["value"] for o in question["options"] if "value" in o["when"]}
    claims_ = {o["when"]["claim"] for o in question["options"] if "claim" in o["when"]}
    return values, claims_


def _same_number(printed: str, rendered: str) -> bool:
    """Whether ``printed`` shows the number ``rendered`` shows, at its precision or finer."""
    places = len(rendered.partition(".")[2].partition("e")[0])
    if "e" in rendered.lower() or len(printed.partition(".")[2].partition("e")[0]) < places:
        return printed == rendered
    try:
        return f"{float(printed):.{places}f}" == rendered
    except ValueError:
        return False


def answered_above(above: str, stem: str, question: dict, records: dict) -> tuple[list[str], list[str]]:
    """How the page ``above`` a prediction already answers it: the deciding placeholders it holds,
    and the deciding values' numbers it shows (printed by a cell, say)."""
    values, claims_ = deciders(question)
    placed = []
    for found in QUOTE.finditer(above):
        if found.group(2) not in (None, stem):
            continue
        name = found.group(3)
        if (name in claims_) if found.group(1) else (name in values):
            placed.append(found.group(0))
    text = html.unescape(HIDDEN.sub(" ", QUOTE.sub(" ", above)))
    printed = []
    for name in sorted(values):
        rendered = records.get("values", {}).get(name, {}).get("text", "").rstrip("%")
        # a bare small count (2, 16) turns up in any text: only a number with three digits or more
        if RENDERED.fullmatch(rendered) and sum(c.isdigit() for c in rendered.lstrip("0.")) >= 3:
            if any(_same_number(n, rendered) for n in RENDERED.findall(text)):
                printed.append(f"{name}'s number {rendered}")
    return sorted(set(placed)), printed


def position_spread(positions: list[tuple[int, int]]) -> list[str]:
    """The positions that hold too large a share of the right answers, given (right, options) per question."""
    groups = {
        "two options": [right for right, count in positions if count == 2],
        "three or more options": [right for right, count in positions if count > 2],
    }
    problems = []
    for group, rights in groups.items():
        for position in sorted(set(rights)):
            share = rights.count(position) / len(rights)
            if len(rights) >= FEWEST_JUDGED and share > MOST_RIGHT[group]:
                problems.append(
                    f"among the questions of {group}, option {position + 1} is right in {rights.count(position)} "
                    f"of {len(rights)} (at most {MOST_RIGHT[group]:.0%})"
                )
    return problems


def _text(text: str) -> str:
    """Prose of a question: escaped, with `code` spans; $math$ and {{ placeholders }} kept."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text, quote=False))


def form(stem: str, name: str, question: dict, right: int | None, measurement: str | None) -> str:
    """The question as a form; its answer stays hidden until the learner commits (predictions.js)."""
    kind = question["kind"]
    section = question["section"]
    options = []
    for i, option in enumerate(question["options"]):
        options.append(
            f'<li class="bertlab-predict__option" data-option="{i}">'
            f'<label><input type="radio" name="bertlab-predict-{html.escape(name)}" value="{i}"> '
            f"{_text(option['label'])}</label>"
            f'<p class="bertlab-predict__explain" hidden>{_text(option["explain"])}</p></li>'
        )
    if kind == "predict":
        target = f"#{measurement}" if measurement else f"#{section['anchor']}"
        more = f'<a href="{html.escape(target)}">See the measurement below</a>'
    else:
        more = f'Reread: <a href="#{html.escape(section["anchor"])}">{_text(section["title"])}</a>'
    unsettled = (
        ""
        if right is not None
        else '<p class="bertlab-predict__unsettled">This machine\'s numbers do not select a single answer: '
        "tell your instructor, with what <code>make doctor</code> prints.</p>"
    )
    return (
        f'<form class="bertlab-predict bertlab-predict--{kind}" data-lesson="{html.escape(stem)}" '
        f'data-name="{html.escape(name)}" data-kind="{kind}" data-right="{"" if right is None else right}" '
        f'id="predict-{html.escape(name)}">'
        f'<p class="bertlab-predict__title">{TITLES[kind]}</p>'
        f'<p class="bertlab-predict__question">{_text(question["question"])}</p>'
        f'<ol class="bertlab-predict__options">{"".join(options)}</ol>'
        f'<p class="bertlab-predict__actions"><button type="submit" class="md-button">Commit my answer</button> '
        f'<span class="bertlab-predict__status" role="status"></span></p>'
        f'<div class="bertlab-predict__answer" hidden><p class="bertlab-predict__verdict"></p>'
        f'<p class="bertlab-predict__more">{more}</p>{unsettled}</div>'
        "</form>"
    )


def render(page_html: str, stem: str) -> tuple[str, list[str], list[str]]:
    """``page_html`` with its questions as forms; the problems; the names of questions left unsettled."""
    records = read(page_html) or {}
    questions = records.get("predictions", {})
    problems: list[str] = []
    unsettled: list[str] = []
    placed: list[str] = []

    def replace(found: re.Match) -> str:
        name = found.group(1)
        question = questions.get(name)
        if question is None:
            problems.append(f"{{{{ predict: {name} }}}} names no question the lesson declared")
            return found.group(0)
        if name in placed:
            problems.append(f"{{{{ predict: {name} }}}} is placed twice")
        placed.append(name)
        stray = stray_numbers(question)
        if stray:
            problems.append(
                f"{name}: numbers written in digits ({', '.join(stray)}); quote recorded ones as {{{{ name }}}}"
            )
        try:
            right = right_options(question, records)
        except KeyError as err:
            problems.append(f"{name}: an option names no {err.args[0]} recorded by the lesson")
            return found.group(0)
        if len(right) != 1:
            unsettled.append(f"{name} (options {right or 'none'} right)")
        if question["kind"] == "predict":
            shown, printed = answered_above(page_html[: found.start()], stem, question, records)
            if shown or printed:
                problems.append(f"{name}: the page answers it above the question: {', '.join(shown + printed)}")
        after = CODE_CELL.search(page_html, found.end())
        measurement = after.group(1) if after and question["kind"] == "predict" else None
        return form(stem, name, question, right[0] if len(right) == 1 else None, measurement)

    page_html = PLACEHOLDER.sub(replace, page_html)
    # The explanations' placeholders inside the published script stay as they are: written
    # "{\u007b", which JSON reads as "{{" and the claims hook does not take for a placeholder.
    page_html = SCRIPT.sub(lambda found: found.group(0).replace("{{", "{\\u007b"), page_html)
    problems += [
        f"{name} is declared and never placed as {{{{ predict: {name} }}}}" for name in questions if name not in placed
    ]
    for name in placed:
        anchor = questions[name]["section"]["anchor"]
        if f'id="{anchor}"' not in page_html:
            problems.append(f"{name}: no section of the lesson has the heading {questions[name]['section']['title']!r}")
    return page_html, problems, unsettled


def on_config(config):
    _index.clear()
    _unsettled.clear()
    _positions.clear()
    return config


def on_page_content(page_html, page, config, files):
    stem = lesson_stem(page.file.src_uri)
    if stem is None:
        return page_html
    page_html, problems, unsettled = render(page_html, stem)
    if problems:
        raise PluginError(f"{page.file.src_uri}: questions\n" + "\n".join(problems))
    if unsettled and strict():
        raise PluginError(
            f"{page.file.src_uri}: the recorded numbers select no single answer:\n" + "\n".join(unsettled)
        )
    _unsettled.extend(f"{stem}: {u}" for u in unsettled)
    records = read(page_html) or {}
    questions = records.get("predictions", {})
    rights = {name: right_options(q, records) for name, q in questions.items()}
    _positions[stem] = [(r[0], len(questions[name]["options"])) for name, r in rights.items() if len(r) == 1]
    if questions:
        _index[stem] = {
            "title": page.title or stem,
            "url": page.url,
            "questions": {name: q["kind"] for name, q in questions.items()},
        }
    return page_html


def on_page_context(context, page, config, nav):
    """The Progress page gets every lesson's questions, in the course's order, for its table."""
    if page.file.src_uri != PROGRESS_PAGE:
        return context
    order = [p.file.src_uri for p in nav.pages]
    lessons = [
        {"lesson": stem, **_index[stem]}
        for stem in sorted(_index, key=lambda s: order.index(f"lessons/{s}.py") if f"lessons/{s}.py" in order else 99)
    ]
    text = json.dumps(lessons, sort_keys=True).replace("</", "<\\/")
    page.content += f'<script type="application/json" id="{INDEX_ID}">{text}</script>'
    return context


def on_post_build(config):
    spread = position_spread([p for stem in sorted(_positions) for p in _positions[stem]])
    if spread and strict():
        raise PluginError("The lessons' right answers favour a position:\n" + "\n".join(spread))
    if _unsettled:
        # Printed, not logged: mkdocs --strict counts logged warnings and would abort the build.
        print(
            f"WARNING -  {len(_unsettled)} question(s) of the lessons are not settled by this machine's numbers "
            f"({'; '.join(_unsettled)}); their pages say so. Tell your instructor, with what `make doctor` prints.",
            file=sys.stderr,
        )
