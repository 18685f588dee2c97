"""A submission that goes for the class's secrets: the cell a hostile learner would write to copy
the hidden tests, a classmate's work or the instructor's tokens into its own feedback.

It tries to read each of ``targets`` (files and folders the test names: the course's solutions,
a classmate's submission, the gradebook, another notebook's grading folder), to list every
folder above its own working folder and the grading folders beside it (where a Dask worker
unpacks the sources with their hidden tests), to read its parent's environment and command line
in ``/proc``, and to find ``secret`` (a token in the instructor's environment) in its own
environment. What got through is ``THROUGH``.

So that the test cannot pass with nothing checked, the cell's verdict decides the notebook's
score: ``guarded`` puts ``assert SANDBOX_HELD, THROUGH`` at the top of the notebook's first
solution cell (the learner's own: nbgrader restores the locked ones), so one read that gets
through (or a cell that never ran to its end) costs that cell's points, and the failure message
lists what was read. ``run_unconfined`` runs the same cell
without a sandbox, to show that each target is there to be read.
"""

from __future__ import annotations

import json
import subprocess
import sys

import nbformat

SECRET_NAME = "GRADER_API_TOKEN"  # the kind of variable an instructor's shell holds

CELL = """import json, os
targets, secret = json.loads({targets!r}), {secret!r}
THROUGH = []


def attempt(what, path):
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            with open(path, "rb") as f:
                f.read(64)
    except OSError:
        return
    THROUGH.append(f"{{what}}: {{path}}")


for what, path in targets.items():
    attempt(what, path)
here = os.getcwd()
up = os.path.dirname(here)
while up != os.path.dirname(up):
    attempt("a folder above its own", up)
    for beside in ("source", "submitted", "instructor", "solutions"):
        attempt("a folder beside its own", os.path.join(up, beside))
    up = os.path.dirname(up)
for what in ("environ", "cmdline", "status"):
    attempt(f"its parent's {{what}}", f"/proc/{{os.getppid()}}/{{what}}")
attempt("the process list", "/proc")
if secret in json.dumps(dict(os.environ)):
    THROUGH.append("the instructor's token, in its environment")
try:
    with open("/proc/self/environ", "rb") as f:
        if secret.encode() in f.read():
            THROUGH.append("the instructor's token, in /proc/self/environ")
except OSError:
    pass
SANDBOX_HELD = not THROUGH
"""


def cell(targets: dict[str, str], secret: str) -> str:
    return CELL.format(targets=json.dumps(targets), secret=secret)


def guarded(right: nbformat.NotebookNode, targets: dict[str, str], secret: str) -> nbformat.NotebookNode:
    """``right`` (a finished notebook) with the hostile cell first, and its first solution cell
    defining anything only if nothing got through."""
    first = next(c for c in right.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution"))
    first.source = "assert SANDBOX_HELD, THROUGH\n" + first.source
    right.cells[:0] = [nbformat.v4.new_code_cell(cell(targets, secret))]
    return right


def run_unconfined(targets: dict[str, str], secret: str, cwd: str, env: dict) -> list[str]:
    """What the cell reads when nothing confines it: each target, for a test's control."""
    source = cell(targets, secret) + "\nprint(json.dumps(THROUGH))\n"
    out = subprocess.run([sys.executable, "-c", source], cwd=cwd, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)
