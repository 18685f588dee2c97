"""``nbgrader autograde`` with bertlab's verdicts.

nbgrader scores a grade cell by its output after running the notebook in the learner's kernel,
where a learner's cell can rebind ``check`` or swallow errors. This preprocessor runs after
nbgrader's ``Execute``: it judges a copy of the notebook the way ``bertlab grade`` does (learner
code in its own process, checks outside it) and writes each grade cell's verdict as that cell's
output, so ``SaveAutoGrades``, feedback and export see the same scores as ``bertlab grade``.
The course's ``nbgrader_config.py`` puts it in ``Autograde.autograde_preprocessors``.
"""

from __future__ import annotations

import copy
from pathlib import Path

from nbformat.v4 import new_output
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Float

from bertlab.settings import DEFAULTS


class JudgeVerdicts(NbGraderPreprocessor):
    """Replace every grade cell's output with the judge's verdict on it."""

    timeout = Float(0, help=f"seconds per notebook (0: the course's bertlab.toml, else {DEFAULTS['timeout']:g})").tag(
        config=True
    )
    memory_limit = Float(
        0, help=f"MB for the learner's process (0: the course's bertlab.toml, else {DEFAULTS['memory_limit']:g})"
    ).tag(config=True)

    def preprocess(self, nb, resources):
        from bertlab.grading.execute import run_notebook
        from bertlab.grading.notebooks import course_root
        from bertlab.grading.results import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT
        from bertlab.settings import grade_settings

        folder = resources.get("metadata", {}).get("path") or "."
        settings = grade_settings(course_root(Path(folder).resolve()) or course_root(Path.cwd()))
        result = run_notebook(
            _without_outputs(nb),
            timeout=self.timeout or settings.get("timeout", DEFAULT_TIMEOUT),
            memory_mb=self.memory_limit or settings.get("memory_limit", DEFAULT_MEMORY_MB),
            cwd=str(folder),
        )
        write_verdicts(nb, {check.name: (check.passed, check.message) for check in result.checks})
        return nb, resources


def write_verdicts(nb, verdicts: dict[str, tuple[bool, str]]) -> None:
    """Each grade cell's output becomes its verdict (grade id -> (passed, message)): the message
    printed when it passed, an error when it failed or was never reached."""
    from bertlab.grading.results import grade_cell_meta

    for cell in nb.cells:
        meta = grade_cell_meta(cell)
        if meta is None:
            continue
        grade_id = meta.get("grade_id")
        verdict = verdicts.get(grade_id) if grade_id is not None else None
        if verdict is None:
            cell.outputs = [_error("the grader did not reach this cell")]
        elif verdict[0]:
            cell.outputs = [new_output("stream", name="stdout", text=verdict[1] + "\n")]
        else:
            cell.outputs = [_error(verdict[1])]


def _without_outputs(nb):
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def _error(message: str):
    lines = message.splitlines() or [message]
    return new_output("error", ename="CheckFailed", evalue=lines[0], traceback=lines)
