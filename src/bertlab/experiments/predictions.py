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
# Where a notebook asks a "why" (Task 7's experiments), an ungraded cell asks the learner to
# predict before measuring: the guess is a letter written in that cell, so the notebook itself
# keeps it. After the measurements, ``reveal`` sets it beside the option the learner's own
# numbers select. Neither changes a grade.


def guess(question: str, options: dict[str, str], choice: str | None) -> str | None:
    """Show a notebook's prediction question and the learner's ``choice`` (a key of ``options``)."""
    print(question)
    for key, text in options.items():
        print(f"  {key!r}: {text}")
    if choice is None:
        print("Write your letter in this cell, then run it again, before you measure.")
    elif choice not in options:
        print(f"{choice!r} is not one of {', '.join(map(repr, options))}: write one of them.")
    else:
        print(f"Your prediction: {choice!r}, {options[choice]}. Your measurements will tell (end of the notebook).")
    return choice


def reveal(choice: str | None, options: dict[str, str], measured: str, numbers: str, reread: str) -> bool:
    """The learner's prediction beside ``measured``, the option their own numbers select.

    ``numbers`` says what the learner's code measured; ``reread`` names the lesson section that
    explains it, for a prediction that was wrong.
    """
    print(f"Your measurements: {numbers}, so {measured!r}, {options[measured]}.")
    if choice is None:
        print("You made no prediction.")
    elif choice == measured:
        print(f"You predicted {choice!r}: right.")
    else:
        print(f"You predicted {choice!r}, {options.get(choice, 'not an option')}. Reread {reread}.")
    return choice == measured
