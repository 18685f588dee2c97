"""Questions a lesson asks before a measurement, and at its end, answered by the lesson's own numbers.

A prediction sits in the prose, before the code that measures, as ``{{ predict: name }}``; the
lesson declares it with ``predict`` (a question and a few options) in a cell whose code the page
hides (tagged ``remove-input``; it must print nothing: a removed cell would not even run). A
"Check yourself" question at the end of a lesson is declared with ``check`` and placed the same
way. No option is marked right by hand. Each option says when it is right:

- ``between(value, low, high, ...)``: when the number the lesson records as ``value`` (with
  ``claims.value``) lies in ``[low, high)`` (``None``: unbounded);
- ``holds(claim, ...)`` / ``fails(claim, ...)``: when the lesson's claim holds, or does not.

The declarations are published with the lesson's claims (``claims.publish``), and the site build
(``docs/hooks/predictions.py``) selects the right option from the numbers the lesson recorded on
this machine, so the answer cannot drift from the measurement. Explanations quote numbers only as
``{{ name }}`` placeholders, filled by the build; a digit written in an explanation that is not
in an option's label fails the build. A wrong option's explanation says what belief would have
produced it.

The options show in the order declared, so a page reads the same on every build: place the
right one so that the course favours no position (the strict build fails when one holds more than
60% of the right answers among two-option questions, or 40% among larger ones), and offer a third
option, a range a plausible misconception predicts, where the quantity allows. Nothing above a
prediction may answer it: the build refuses a placeholder of its deciding claim or value, or that
value's number printed, before the question.

The learner commits an answer on the page before seeing any explanation; the page keeps it in the
browser (``docs/assets/predictions.js``) and the Progress page counts the answers per lesson.
"""

from __future__ import annotations

from bertlab.experiments import claims
from bertlab.headings import heading_id

KINDS = ("predict", "check")


def _option(label: str, explain: str, when: dict) -> dict:
    if not label.strip() or not explain.strip():
        raise ValueError("an option needs a label and an explanation")
    return {"label": label, "explain": explain, "when": when}


def between(value: str, low: float | None, high: float | None, label: str, explain: str) -> dict:
    """An option right when the recorded ``value`` lies in ``[low, high)`` (``None``: no bound)."""
    if low is not None and high is not None and not low < high:
        raise ValueError(f"option {label!r}: empty range [{low}, {high})")
    return _option(label, explain, {"value": value, "low": low, "high": high})


def holds(claim: str, label: str, explain: str) -> dict:
    """An option right when the lesson's claim ``claim`` holds."""
    return _option(label, explain, {"claim": claim, "holds": True})


def fails(claim: str, label: str, explain: str) -> dict:
    """An option right when the lesson's claim ``claim`` does not hold."""
    return _option(label, explain, {"claim": claim, "holds": False})


def _record(name: str, kind: str, question: str, options: list[dict], section: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"prediction {name!r}: kind {kind!r} is not one of {KINDS}")
    if len(options) < 2:
        raise ValueError(f"prediction {name!r}: a question needs at least two options")
    if len({o["label"] for o in options}) != len(options):
        raise ValueError(f"prediction {name!r}: two options share a label")
    claims._predictions[name] = {
        "kind": kind,
        "question": question,
        "options": list(options),
        "section": {"title": section, "anchor": heading_id(section)},
    }


def predict(name: str, question: str, options: list[dict], section: str) -> None:
    """Ask ``question`` before a measurement, placed in the prose as ``{{ predict: name }}``.

    ``section`` is the heading of the lesson's section that holds the measurement: the revealed
    answer links to it.
    """
    _record(name, "predict", question, options, section)


def check(name: str, question: str, options: list[dict], section: str) -> None:
    """A "Check yourself" question at the end of a lesson, placed as ``{{ predict: name }}``.

    ``section`` is the heading of the section to reread when the answer was wrong.
    """
    _record(name, "check", question, options, section)


# -- in the exercise notebooks -------------------------------------------------------------------
