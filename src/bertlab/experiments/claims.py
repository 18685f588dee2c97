"""The numbers a lesson's prose quotes and the comparisons it makes, recorded for the site build.

A lesson's code computes its numbers. Its Markdown quotes them as ``{{ name }}`` and ends each
sentence that compares them with ``{{ claim: name }}``. As the lesson runs, ``value`` records a
number under a name and ``claim`` records a comparison of two numbers (and fails at once, in the
lesson, if it does not hold). The lesson's last cell calls ``publish``, which writes everything
into the page as a JSON script. The site build (the ``claims`` hook) reads it, puts the values
into the prose and checks every claim again. Other pages (the FAQ, the guides) quote a lesson's
records as ``{{ 05-feed-forward: name }}``.

What a claim that does not hold does depends on who builds (``BERTLAB_CLAIMS``, read at each
claim): ``strict`` (``make test``, CI, the test suite) raises ``ClaimError`` in the lesson and
the build fails; anything else (a learner's ``make start`` or ``make site``) records it as not
holding, and the build marks its sentence and names it in one warning. A learner whose CPU rounds
differently gets the whole course and is told which sentence their machine does not bear out;
the course's own runs, which check every CPU capability (``tests/test_claims_under_kernels.py``),
fail.

A comparison is reduced to two numbers on purpose: "in every layer, a is smaller than b" is
``claim(name, max(a - b), "<", 0)``, so the build can check it again from the page alone.
"""

from __future__ import annotations

import json
import math
import operator
import os

# What a claim may say about its two numbers.
OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne}
# The script the build looks for in a lesson's page.
SCRIPT_TYPE = "application/vnd.bertlab.claims+json"

_values: dict[str, dict] = {}
_claims: dict[str, dict] = {}
# Questions answered by the values and claims above (bertlab.experiments.predictions), published with them.
_predictions: dict[str, dict] = {}


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


def strict() -> bool:
    """Whether a claim that does not hold stops the lesson (see the module's docstring)."""
    return os.environ.get("BERTLAB_CLAIMS", "").strip().lower() == "strict"


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
    Returns whether it holds; when it does not, raises ``ClaimError`` in strict mode.
    """
    if op not in OPS:
        raise ValueError(f"claim {name!r}: unknown comparison {op!r} (one of {', '.join(OPS)})")
    sides = [_values[s]["value"] if isinstance(s, str) else _number(s) for s in (left, right)]
    if None in sides:
        raise ValueError(f"claim {name!r} compares a value recorded as text")
    record = {"left": sides[0], "op": op, "right": sides[1], "says": says}
    _claims[name] = record
    if holds(record):
        return True
    if strict():
        raise ClaimError(
            f"claim {name!r} does not hold: {sides[0]:.6g} {op} {sides[1]:.6g} is false, yet the prose says: {says}"
        )
    return False


def margin(record: dict) -> float | None:
    """How far a claim holds: the ratio of its larger side to its smaller, in the claimed direction.

    ``a < b`` with ``b = 1.3 a`` (both positive) has margin 1.3; one that does not hold has a margin
    below 1. Both sides negative: the ratio of their sizes. Sides of opposite signs (``a < 0``
    where ``a`` is a difference) or a zero side have no ratio: infinite when the claim holds, 0
    when not; the course words its claims as ratios of positive quantities where it can, so that
    a margin says how thin a claim is. ``==`` and ``!=`` have none (None): they hold or not.
    """
    op, left, right = record["op"], record["left"], record["right"]
    if op in ("==", "!="):
        return None
    small, big = (left, right) if op in ("<", "<=") else (right, left)
    if any(isinstance(v, float) and math.isnan(v) for v in (small, big)):
        return 0.0
    if small > 0 and big > 0:
        return big / small
    if small < 0 and big < 0:
        return small / big
    return math.inf if holds(record) else 0.0


def records() -> dict:
    """Everything recorded so far in this process: ``{"values": .., "claims": .., "predictions": ..}``."""
    return {"values": dict(_values), "claims": dict(_claims), "predictions": dict(_predictions)}


def condition() -> dict:
    """The CPU condition the lesson ran under: torch's kernel set and its threads. Published with
    the records, so a test of the claims under every condition knows which one a built page ran."""
    import torch

    return {"capability": torch.backends.cpu.get_cpu_capability().lower(), "threads": torch.get_num_threads()}


def publish():
    """The lesson's last cell: the records as a hidden script for the build (an HTML output)."""
    from IPython.display import HTML

    published = {**records(), "condition": condition()}
    text = json.dumps(published, sort_keys=True).replace("</", "<\\/")  # cannot end the script early
    return HTML(f'<script type="{SCRIPT_TYPE}">{text}</script>')
