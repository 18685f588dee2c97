"""The autograde step of ``bertlab autograde``: verdicts judged beforehand become grade-cell outputs.

Under ``nbgrader autograde`` the course's ``JudgeVerdicts`` judges each notebook and writes every
grade cell's verdict as that cell's output. ``bertlab autograde`` judges the class in parallel
first; this preprocessor then writes the same outputs in the same place of nbgrader's own
Autograde converter, so SaveAutoGrades, feedback and export see what ``nbgrader autograde``
leaves.
"""

from __future__ import annotations

from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Dict

from bertlab.nbgrader_verdicts import write_verdicts


class RecordedVerdicts(NbGraderPreprocessor):
    """Replace every grade cell's output with its recorded verdict, as ``JudgeVerdicts`` does."""

    verdicts = Dict(help="notebook id -> grade id -> [passed, message]")

    def preprocess(self, nb, resources):
        recorded = self.verdicts.get(resources["nbgrader"]["notebook"], {})
        write_verdicts(nb, {grade_id: (passed, message) for grade_id, (passed, message) in recorded.items()})
        return nb, resources
