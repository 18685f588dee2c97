"""The numbers a lesson's prose quotes and the comparisons it makes, recorded for the site build.

A lesson's code computes its numbers. Its Markdown quotes them as ``{{ name }}`` and ends each
sentence that compares them with ``{{ claim: name }}``. As the lesson runs, ``value`` records a
number under a name and ``claim`` records a comparison of two numbers (and fails at once, in the
lesson, if it does not hold). The lesson's last cell calls ``publish``, which writes everything
into the page as a JSON script. The site build (the ``claims`` hook) reads it, puts the values
into the prose, checks every claim again and fails the build on a placeholder that names nothing
recorded or a claim that does not hold. Other pages (the FAQ, the guides) quote a lesson's
records as ``{{ 05-feed-forward: name }}``.

A comparison is reduced to two numbers on purpose: "in every layer, a is smaller than b" is
``claim(name, max(a - b), "<", 0)``, so the build can check it again from the page alone.
"""

from __future__ import annotations

import json
import math
import operator

# What a claim may say about its two numbers.
OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne}
# The script the build looks for in a lesson's page.
SCRIPT_TYPE = "application/vnd.bertlab.claims+json"

_values: dict[str, dict] = {}
_claims: dict[str, dict] = {}


class ClaimError(AssertionError):
    """A sentence of the prose says what the numbers do not."""


def _number(x) -> float:
    """A plain float from a Python number, a bool, or a one-element tensor or array."""
    return float(x.item() if hasattr(x, "item") else x)


def value(name: str, number, fmt: str = "{:.3g}"):
    """Record ``number`` for the prose's ``{{ name }}``, shown with ``fmt``; returns ``number``.

    A string (a library's version, say) is quoted as it is and cannot take part in a claim.
    """
    if isinstance(number, str):
        _values[name] = {"value": None, "text": number}
        return number
    x = _number(number)
    _values[name] = {"value": x, "text": fmt.format(x)}
    return number


def holds(record: dict) -> bool:
    """Whether a recorded claim, ``{"left": .., "op": .., "right": ..}``, holds."""
    left, right = record["left"], record["right"]
    if any(isinstance(v, float) and math.isnan(v) for v in (left, right)):
        return False
    return bool(OPS[record["op"]](left, record["right"]))


def claim(name: str, left, op: str, right, says: str) -> bool:
    """Record that the prose's sentence ``{{ claim: name }}`` says ``left op right``.

    ``left`` and ``right`` are numbers, or names of values recorded with ``value``; ``says``
    is what the sentence says, in words, for the build's message and the reader's tooltip.
    Raises ``ClaimError`` when the comparison does not hold.
    """
    if op not in OPS:
        raise ValueError(f"claim {name!r}: unknown comparison {op!r} (one of {', '.join(OPS)})")
    sides = [_values[s]["value"] if isinstance(s, str) else _number(s) for s in (left, right)]
    if None in sides:
        raise ValueError(f"claim {name!r} compares a value recorded as text")
    record = {"left": sides[0], "op": op, "right": sides[1], "says": says}
    _claims[name] = record
    if not holds(record):
        raise ClaimError(
            f"claim {name!r} does not hold: {sides[0]:.6g} {op} {sides[1]:.6g} is false, yet the prose says: {says}"
        )
    return True


def records() -> dict:
    """Everything recorded so far in this process: ``{"values": .., "claims": ..}``."""
    return {"values": dict(_values), "claims": dict(_claims)}


def publish():
    """The lesson's last cell: the records as a hidden script for the build (an HTML output)."""
    from IPython.display import HTML

    text = json.dumps(records(), sort_keys=True).replace("</", "<\\/")  # cannot end the script early
    return HTML(f'<script type="{SCRIPT_TYPE}">{text}</script>')
