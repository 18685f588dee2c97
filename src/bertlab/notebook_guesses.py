"""A prediction in an exercise notebook: the learner's guess before a "why" measurement, and after
it, the guess beside the option the learner's own numbers select.

Notebook 07 imports these in ungraded cells. They live outside the grader's code
(``bertlab.checks``, ``bertlab.experiments``, ...), which a notebook being graded may not import,
and they print only: neither changes a grade. The lessons' own questions are
``bertlab.experiments.predictions``.
"""

from __future__ import annotations


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
