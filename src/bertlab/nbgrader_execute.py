"""nbgrader's ``Execute``, with a reason where a learner's cell ended its kernel.

When the kernel dies while a cell runs (the cell killed its own process, called ``os._exit()``,
or passed the course's memory limit and was stopped: ``bertlab.kernel_template``), nbclient
raises ``DeadKernelError`` and nbgrader drops the whole submission: no autograded copy, no
feedback, 0 in the export, and "Kernel died" in the log. Here the cell that was running gets an
error output saying why the kernel ended, the cells after it are left unrun (their outputs
cleared: a new kernel would run them without what came before), the log names the notebook and
the cell, and autograde goes on: ``bertlab.nbgrader_verdicts.JudgeVerdicts`` then judges the
notebook as ``bertlab grade`` does and gives every grade cell its verdict, with the reason.
"""

from __future__ import annotations

from pathlib import Path

from nbclient.exceptions import DeadKernelError
from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute as NbgraderExecute


class Execute(NbgraderExecute):
    """nbgrader's ``Execute`` (configured as ``c.Execute``) that survives its kernel's death."""

    kernel_ended: str | None = None  # why this notebook's kernel ended, once it has

    def preprocess(self, nb, resources=None, km=None):
        self.kernel_ended = None
        return super().preprocess(nb, resources, km)

    def preprocess_cell(self, cell, resources, index):
        if self.kernel_ended is not None:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
            return cell, self.resources
        try:
            return super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self.kernel_ended = self._why_ended()
            cell.outputs.append(
                new_output("error", ename="KernelDied", evalue=self.kernel_ended, traceback=[self.kernel_ended])
            )
            where = (self.resources.get("metadata") or {}).get("path") or "."
            self.log.error("%s: cell %d ended the notebook's kernel: %s", where, index, self.kernel_ended)
            return cell, self.resources

    def _why_ended(self) -> str:
        from bertlab.grading.notebooks import course_root
        from bertlab.grading.platforms.linux.confined_kernel import describe
        from bertlab.settings import DEFAULT_MEMORY_MB, PROCESS_LIMIT, SettingsError, grade_settings

        process = getattr(getattr(self.km, "provisioner", None), "process", None)
        status = process.poll() if process is not None else None
        folder = Path((self.resources.get("metadata") or {}).get("path") or ".").resolve()
        try:
            memory = grade_settings(course_root(folder)).get("memory_limit", DEFAULT_MEMORY_MB)
        except SettingsError:
            memory = DEFAULT_MEMORY_MB
        return describe(status, memory, PROCESS_LIMIT)
