"""nbgrader's ``ClearHiddenTests`` for ``generate_feedback``, without a warning about nbconvert's settings.

The course's feedback clears hidden tests (``nbgrader_config.py``). nbgrader's preprocessors
redeclare nbconvert's ``display_data_priority`` without marking it configurable, so when the
HTML exporter hands its configured value to them, ``nbgrader generate_feedback`` warns on every
run that ``ClearHiddenTests`` does not recognise it: noise an instructor would have to learn to
ignore. nbgrader's own ``GetGrades`` marks it configurable; this does the same for ``ClearHiddenTests``,
whose behaviour is otherwise nbgrader's.
"""

from __future__ import annotations

from nbgrader.preprocessors import ClearHiddenTests as NbgraderClearHiddenTests
from traitlets import List


class ClearHiddenTests(NbgraderClearHiddenTests):
    display_data_priority = List(NbgraderClearHiddenTests.display_data_priority.default_value).tag(config=True)
