"""A submission that goes for the grader's processes: the cell a hostile learner would write.

It walks up from its own process through every ancestor (the learner's template, the judge
factory, the grade command or the Dask worker and its nanny; only its parent where ``/proc``
hides the others) and sends each SIGKILL, tries to
read the nearest one's memory and to connect to a TCP port on this machine, and writes in its
own folder what got through. It stops below the test runner (a process whose command line names
pytest): if the sandbox ever let a signal through, the test fails without killing the run.
"""

from __future__ import annotations

import nbformat

REPORT = "attacks.txt"  # written in the notebook's working folder, read back by nobody

CELL = f"""import os, signal, socket
ancestors, pid = [], os.getppid()
while pid > 1:
    try:
        command = open(f"/proc/{{pid}}/cmdline", "rb").read()
        parent = int(open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()[1])
    except OSError:  # the sandbox hides every other process's /proc entry: its parent it knows all the same
        ancestors += [] if ancestors else [pid]
        break
    if b"pytest" in command:
        break
    ancestors.append(pid)
    pid = parent
through = []
for pid in ancestors:
    try:
        os.kill(pid, signal.SIGKILL)
        through.append(f"killed {{pid}}")
    except OSError:
        pass
for pid in ancestors[:1]:
    try:
        open(f"/proc/{{pid}}/mem", "rb").read(1)
        through.append(f"read {{pid}}'s memory")
    except OSError:
        pass
try:
    socket.create_connection(("127.0.0.1", 8786), timeout=1).close()
    through.append("connected to a TCP port")
except OSError:
    pass
open("{REPORT}", "w").write("\\n".join(through))
"""


def notebook(right: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``right`` (a learner's finished notebook) with the hostile cell first."""
    right.cells[:0] = [nbformat.v4.new_code_cell(CELL)]
    return right
