"""The memory and process limits hold for everything a notebook's code starts, not only for the
process running its cells: children that each stay under the memory limit but together exceed it
stop the notebook, and so do more processes than the limit allows, however they detached.

Forked children map torch and the model copy-on-write with the learner's process: a notebook
that forks a few idle ones (a DataLoader's workers, say) is not stopped, where summing their RSS
would count those pages once per child.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import nbformat
import pytest

from bertlab.settings import PROCESS_LIMIT
from tests.conftest import ROOT
from tests.grading_paths import PATHS, gone_within, path_env

pytestmark = pytest.mark.slow
MARKER = "BERTLAB_TEST_RUN"
LIMIT_MB = 1000  # above a learner's own process on every course notebook, below it with the hogs
GRADE = (sys.executable, "-m", "bertlab.cli", "grade", "--cold", "--json", "--no-progress", "--path")
WAIT = "import time\nwhile True:\n    time.sleep(0.1)\n"  # until the judge stops it (else the timeout)

# Three children of 400 MB each, each alone under the limit; the cell waits until all hold it.
FORKED_HOGS = (
    "import os\n"
    "r, w = os.pipe()\n"
    "for _ in range(3):\n"
    "    if os.fork() == 0:\n"
    "        held = b'x' * (400 << 20)\n"
    "        os.write(w, b'.')\n"
    "        time.sleep(600)\n"
    "for _ in range(3):\n"
    "    os.read(r, 1)\n"
)
# The same with new interpreters, on the path without os.fork (macOS).
SPAWNED_HOGS = (
    "import subprocess, sys\n"
    "hogs = [subprocess.Popen([sys.executable, '-c', \"import sys, time; held = b'x' * (400 << 20); "
    'print(flush=True); time.sleep(600)"], stdout=subprocess.PIPE) for _ in range(3)]\n'
    "for hog in hogs:\n"
    "    hog.stdout.readline()\n"
)
# Five forked children that hold nothing of their own: together under the limit.
IDLE_FORKS = "import os, time\nfor _ in range(5):\n    if os.fork() == 0:\n        time.sleep(600)\n"
# More processes than the limit, none of them a child of the learner's process's session: half
# leave it with setsid, half with a double fork (their parent ends, so they are orphans).
DETACHED = (
    "import os, subprocess\n"
    f"for _ in range({PROCESS_LIMIT // 2 + 1}):\n"
    "    subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
    "    middle = os.fork()\n"
    "    if middle == 0:\n"
    "        os.setsid()\n"
    "        if os.fork() == 0:\n"
    "            time.sleep(600)\n"
    "        os._exit(0)\n"
    "    os.waitpid(middle, 0)\n"
)
# In the learner's process group: the portable path ends a notebook's processes by their group.
IN_GROUP = f"import subprocess\nfor _ in range({PROCESS_LIMIT + 1}):\n    subprocess.Popen(['sleep', '600'])\n"
# What each path's notebooks start, by task: the portable path has no os.fork (macOS), nor a way
# to find or end a process that detached itself.
CELLS = {
    "linux": {
        "05-feed-forward": "import time\n" + FORKED_HOGS + WAIT,
        "04-attention-output": IDLE_FORKS,
        "02-embeddings": "import time\n" + DETACHED + WAIT,
    },
    "portable": {
        "05-feed-forward": SPAWNED_HOGS + WAIT,
        "02-embeddings": IN_GROUP + WAIT,
    },
}


def course(folder: Path, cells: dict[str, str]) -> Path:
    """The course's solutions, each with ``cells[task]`` as its first cell."""
    for task, cell in cells.items():
        (folder / task).mkdir(parents=True)
        nb = nbformat.read(ROOT / "solutions" / task / f"{task}.ipynb", as_version=4)
        nb.cells.insert(0, nbformat.v4.new_code_cell(cell))
        nbformat.write(nb, folder / task / f"{task}.ipynb")
    return folder


@pytest.mark.parametrize("path", PATHS)
def test_limits_hold_for_what_a_notebook_starts(tmp_path, path):
    marker = uuid.uuid4().hex
    folder = course(tmp_path, CELLS[path])
    proc = subprocess.run(
        [*GRADE, str(folder), "--memory-limit", str(LIMIT_MB), "--timeout", "120"],
        cwd=ROOT,
        env={**path_env(path), MARKER: marker},
        capture_output=True,
        text=True,
        timeout=900,
    )
    tasks = {task["task"]: task for task in json.loads(proc.stdout)["tasks"]}
    left = gone_within(MARKER, marker, 10)
    hogs, many = tasks["05-feed-forward"], tasks["02-embeddings"]
    assert hogs["status"] == "error" and hogs["score"] == 0, hogs
    assert all(f"more than {LIMIT_MB:g} MB of memory" in c["message"] for c in hogs["checks"]), hogs["checks"]
    assert {c["cause"] for c in hogs["checks"]} == {"memory"}
    assert many["status"] == "error" and many["score"] == 0, many
    said = f"started more than {PROCESS_LIMIT} processes"
    assert all(said in c["message"] for c in many["checks"]), many["checks"]
    assert {c["cause"] for c in many["checks"]} == {"processes"}
    if path == "linux":
        idle = tasks["04-attention-output"]
        assert idle["score"] == idle["max_score"] > 0, idle
    assert not left, f"still running after `bertlab grade` ended: {left}"
