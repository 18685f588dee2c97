"""Worker process: judge one notebook copy and write the result as JSON.

Usage: ``python -m bertlab.grading.worker NOTEBOOK RESULT_JSON TIMEOUT MEMORY_MB``. The learner's
code runs in a process this worker starts (``learner.py``), never in the process that prints
the grade table, so a crash or a hang costs only this notebook; the verdict is made here.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")  # a learner's plt.show() must not need a screen


def main(notebook: str, result_file: str, timeout: str, memory_mb: str) -> None:
    import nbformat

    from bertlab.grading.judge import judge_notebook

    nb = nbformat.read(notebook, as_version=4)
    result = judge_notebook(nb, timeout=float(timeout), memory_mb=float(memory_mb), cwd=os.path.dirname(notebook))
    with open(result_file, "w") as f:
        json.dump(result.to_dict(), f)


if __name__ == "__main__":
    main(*sys.argv[1:5])
