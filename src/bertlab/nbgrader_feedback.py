"""nbgrader's ``ClearHiddenTests`` for ``generate_feedback``: the instructor's cells only, and quiet.

The course's feedback clears hidden tests (``nbgrader_config.py``). nbgrader's own preprocessor
reads every cell, the learner's included: a learner's comment, string or markdown that quotes
``BEGIN HIDDEN TESTS`` made it refuse the whole notebook (a marker outside a grade cell, or
without its end), and the learner got no feedback; quoting both markers would, without that check,
cut the learner's own lines between them out of their feedback. The hidden tests are only in the
cells whose text autograde restored from the gradebook, so only those are cleared; every other
cell is shown as the learner wrote it.

nbgrader's preprocessors also redeclare nbconvert's ``display_data_priority`` without marking it
configurable, so when the HTML exporter hands its configured value to them, ``nbgrader
generate_feedback`` warns on every run that ``ClearHiddenTests`` does not recognise it: noise an
instructor would have to learn to ignore. nbgrader's own ``GetGrades`` marks it configurable;
this does the same for ``ClearHiddenTests``.
"""

from __future__ import annotations

from nbgrader import utils
from nbgrader.preprocessors import ClearHiddenTests as NbgraderClearHiddenTests
from traitlets import List


class ClearHiddenTests(NbgraderClearHiddenTests):
    display_data_priority = List(NbgraderClearHiddenTests.display_data_priority.default_value).tag(config=True)

    def preprocess_cell(self, cell, resources, cell_index):
        if not instructors(cell):
            # The learner's text holds no hidden test (they never had one), whatever it quotes:
            # shown whole, as in the notebook they handed in, nothing cut and nothing refused.
            return cell, resources
        return super().preprocess_cell(cell, resources, cell_index)


def instructors(cell) -> bool:
    """Whether the cell's text is the instructor's: a locked cell (a grade cell that is not an
    answer, or one marked read-only) with the grade id autograde restored its text by. Autograde
    drops an id the gradebook does not know, so a learner's cell that claims to be locked is not."""
    return utils.is_locked(cell) and bool(cell.metadata.get("nbgrader", {}).get("grade_id"))
