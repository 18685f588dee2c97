"""The autograde step of ``bertlab autograde``: verdicts judged beforehand become grade-cell outputs.

Under ``nbgrader autograde`` the course's ``JudgeVerdicts`` judges each notebook and writes every
grade cell's verdict as that cell's output. ``bertlab autograde`` judges the class in parallel
first; this preprocessor then writes the same outputs in the same place of nbgrader's own
Autograde converter, so SaveAutoGrades, feedback and export see what ``nbgrader autograde``
leaves.
"""

from __future__ import annotations

from nbformat.v4 import new_output
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Dict

from bertlab.grading.execute import grade_cell_meta
from bertlab.nbgrader_verdicts import _error


class RecordedVerdicts(NbGraderPreprocessor):
    """Replace every grade cell's output with its recorded verdict, as ``JudgeVerdicts`` does."""

    verdicts = Dict(help="notebook id -> grade id -> [passed, message]")

    def preprocess(self, nb, resources):
        verdicts = self.verdicts.get(resources["nbgrader"]["notebook"], {})
        for cell in nb.cells:
            meta = grade_cell_meta(cell)
            if meta is None:
                continue
            verdict = verdicts.get(meta.get("grade_id"))
            if verdict is None:
                cell.outputs = [_error("the grader did not reach this cell")]
            elif verdict[0]:
                cell.outputs = [new_output("stream", name="stdout", text=verdict[1] + "\n")]
            else:
                cell.outputs = [_error(verdict[1])]
        return nb, resources
