"""Words printed around a measured list, agreeing with it in number.

A lesson that prints "in layers [5]" over a list of one, or "in some layers" over a list the
reader sees holds one, says more than it measured. ``counted`` names the members of a list with
the noun in the right number, and says "no ..." for an empty one.
"""

from __future__ import annotations

from collections.abc import Sequence


def counted(items: Sequence, one: str, many: str | None = None) -> str:
    """``"layer 5"``, ``"layers 3 and 5"``, ``"layers 1, 3 and 5"`` or ``"no layer"``."""
    many = many or one + "s"
    names = [str(item) for item in items]
    if not names:
        return f"no {one}"
    if len(names) == 1:
        return f"{one} {names[0]}"
    return f"{many} {', '.join(names[:-1])} and {names[-1]}"
