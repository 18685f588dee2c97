"""A judge's process: judge notebook copies, one after another, and write each result as JSON.

Usage: ``python -m bertlab.grading.judge_process`` reads one request per line on stdin,
``{"notebook": ..., "result": ..., "timeout": ..., "memory_mb": ...}``, and answers each with a
line ``done`` on stdout once the result file is written. The learner's code runs in processes
this worker forks per notebook (``learner.py``), never here and never in the process that
prints the grade table, so a crash or a hang costs only that notebook; the verdict is made
here. A warm worker keeps the reference model and its captured activations between notebooks:
nothing of a learner reaches them (they cross to the learner's process as copies).
"""

from __future__ import annotations

import gc
import json
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")  # a learner's plt.show() must not need a screen


def judge_file(notebook: str, result_file: str, timeout: float, memory_mb: float) -> None:
    from pathlib import Path

    from bertlab.grading.execute import run_notebook
    from bertlab.grading.notebooks import read

    nb = read(Path(notebook))
    result = run_notebook(nb, timeout=timeout, memory_mb=memory_mb, cwd=os.path.dirname(notebook))
    with open(result_file, "w") as f:
        json.dump(result.to_dict(), f)


def _warm_up() -> None:
    """Load the reference model and its capture before the first request, not during it; for a
    judge that outlives its command, also what the checks compute from the reference alone:
    sentence-transformers' embeddings of the corpus (Task 6.4: read from the file the course ships,
    ``checks/sentence_embeddings.json``, so the judge never imports sentence-transformers) and the
    other config's random model. Nothing of a learner is involved: these are the expected sides of
    comparisons."""
    try:
        from bertlab import capture

        capture.capture()
        from bertlab.grading.pool import WARM_ALL

        if os.environ.get(WARM_ALL) == "1":
            from bertlab import reference
            from bertlab.checks.bert_model import sentence_transformer_embeddings
            from bertlab.checks.framework import Context

            Context.load().other()
            if reference.is_bundled(reference.model_dir()):
                sentence_transformer_embeddings(reference.model_dir())
    except Exception:  # noqa: BLE001  (a broken model is reported by the first notebook's checks, with its reason)
        pass


def load() -> None:
    """What a judge's learner template uses, imported and loaded once: a judge forked after this
    (``platforms.linux.judge_factory``) starts in milliseconds. Nothing of transformers: a learner
    template forked after this must hold none of its code (the learner's process cannot read it,
    and must not find it in memory either). Starts no thread."""
    import IPython.core.interactiveshell  # noqa: F401
    import torch  # noqa: F401

    import bertlab.grading.judge  # noqa: F401
    from bertlab.grading import learner

    learner.preload()  # what notebooks load (pyplot, the course's pretrained model): the template's too


def load_judge_side() -> None:
    """What only a judge uses: the checks and the reference model they compare with, the course's
    own BERT (``bertlab.bert``, transformers' bit for bit: ``tests/test_judge_reference.py``). Nothing
    here imports transformers (``tests/test_judge_imports.py``). Loaded once the learner template is
    forked (``serve``), or in the factory once its template maker is."""
    try:
        from bertlab import bert, checks

        checks.TASKS  # noqa: B018  (imports every task's checks)
        bert.load_model()
    except Exception:  # noqa: BLE001  (a broken model is reported by the first notebook's checks, with its reason)
        pass


def serve() -> None:
    """Get ready to start learner processes (Linux forks its template here, before anything else
    is loaded; the portable path starts a spare), record the reference activations, then judge."""
    from bertlab.grading import platforms
    from bertlab.grading.pool import WARM_ALL

    system = platforms.current()
    # A judge that outlives its command may grade any number of notebooks; a judge of one command
    # is told with each notebook how many may follow it, and expects none beyond its first.
    system.expect_notebooks(None if os.environ.get(WARM_ALL) == "1" else 0)
    system.prepare_learners()
    load_judge_side()
    _warm_up()
    # What is loaded now (modules, the model, its capture) lives as long as the worker: set apart
    # from the collector, the collection after each notebook scans only what that notebook left
    # (0.2 s less per notebook, on the way to every result).
    gc.freeze()
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # stray prints must not corrupt the answers
    for line in sys.stdin:
        request = json.loads(line)
        system.expect_notebooks(request.get("more"))
        judge_file(request["notebook"], request["result"], float(request["timeout"]), float(request["memory_mb"]))
        answers.write("done\n")
        answers.flush()


def main() -> None:
    load()
    serve()


if __name__ == "__main__":
    main()
