"""Worker process: grade one notebook copy and write the result as JSON.

Usage: ``python -m bertlab.grading.worker NOTEBOOK RESULT_JSON``. Learner code runs here, never
in the process that prints the grade table, so a crash or a hang costs only this notebook.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")  # a learner's plt.show() must not need a screen


def main(notebook: str, result_file: str) -> None:
    import nbformat

    from bertlab.grading.execute import run_notebook

    result = run_notebook(nbformat.read(notebook, as_version=4))
    with open(result_file, "w") as f:
        json.dump(result.to_dict(), f)


if __name__ == "__main__":
    main(*sys.argv[1:3])
