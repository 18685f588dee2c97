"""nbgrader's kernels are forks of a template that imported the course once, and nothing outlives it.

Each case starts a process that plays nbgrader (``OWNER``): it writes the kernelspec the course's
``nbgrader_config.py`` writes, starts two kernels one after the other as nbgrader's ``Execute``
does, reports what each kernel saw, and exits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from bertlab import kernel_template
from bertlab.settings import DEFAULT_TIMEOUT
from tests.conftest import ROOT

pytestmark = pytest.mark.slow  # each case imports torch and transformers in a template

OWNER = """
import json, os, sys
from types import SimpleNamespace
from jupyter_client.manager import start_new_kernel
from bertlab import kernel_template
c = SimpleNamespace(Execute=SimpleNamespace())
kernel_template.use_in_nbgrader(c, sys.argv[1])
HISTORY = "--HistoryManager.hist_file=:memory:"  # what nbgrader's Execute passes a Python kernel
CODE = '''
import json, os, sys
print(json.dumps({
    "torch_at_start": "torch" in sys.modules,
    "ppid": os.getppid(),
    "cwd": os.getcwd(),
    "marker": os.environ.get("BERTLAB_KERNEL_MARKER"),
    "history": str(get_ipython().history_manager.hist_file),
    "pid": os.getpid(),
}))
'''
seen = []
for _ in range(2):
    km, kc = start_new_kernel(kernel_name=c.Execute.kernel_name, extra_arguments=[HISTORY])
    out = []
    kc.execute_interactive(CODE, output_hook=lambda m: out.append(m["content"].get("text", "")), timeout=120)
    kernel = json.loads("".join(out))
    # Read here: a confined kernel reads no other process's /proc entry (its parent is its keeper,
    # a fork of the template too).
    kernel["parent"] = open(f"/proc/{kernel['ppid']}/cmdline").read().replace(chr(0), " ")
    seen.append(kernel)
    kc.stop_channels()
    km.shutdown_kernel(now=True)
print(json.dumps({"owner": os.getpid(), "kernels": seen}))
"""


def run_owner(tmp_path, **env) -> dict:
    work = tmp_path / "submission"
    work.mkdir()
    # The marker's name is one a confined kernel's environment keeps (bertlab.grading.confinement).
    proc = subprocess.run(
        [sys.executable, "-c", OWNER, str(tmp_path / "workspace")],
        cwd=work,
        env={**os.environ, "BERTLAB_KERNEL_MARKER": "from-the-owner", "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "cwd": str(work)}


def templates_of(owner: int) -> list[int]:
    socket_path = kernel_template.owner_socket(owner)
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = open(f"/proc/{pid}/cmdline").read()
        except OSError:
            continue
        if "kernel_template" in cmdline and socket_path in cmdline:
            found.append(int(pid))
    return found


def test_nbgraders_kernels_are_forks_of_one_template_with_the_notebooks_own_setting(tmp_path):
    run = run_owner(tmp_path)
    first, second = run["kernels"]
    for kernel in (first, second):
        assert kernel["torch_at_start"], "the kernel imported torch itself: it is no fork of the template"
        assert "kernel_template serve" in kernel["parent"], kernel["parent"]
        assert kernel["cwd"] == run["cwd"] and kernel["marker"] == "from-the-owner"
        assert kernel["history"] == ":memory:", "the kernel lost nbgrader's arguments"
    assert first["pid"] != second["pid"] and first["parent"] == second["parent"]
    # The template ends with the process it served, at once (it watches that process).
    deadline = time.monotonic() + 5
    while templates_of(run["owner"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert templates_of(run["owner"]) == []
    assert not os.path.exists(kernel_template.owner_socket(run["owner"]))


def test_on_the_portable_path_each_kernel_starts_anew(tmp_path):
    run = run_owner(tmp_path, BERTLAB_PORTABLE="1")
    for kernel in run["kernels"]:
        assert not kernel["torch_at_start"] and "kernel_template serve" not in kernel["parent"], kernel
        assert kernel["cwd"] == run["cwd"] and kernel["history"] == ":memory:"
    assert templates_of(run["owner"]) == []


def test_the_course_config_runs_notebooks_in_the_forked_kernel(tmp_path, monkeypatch):
    from traitlets.config import Config

    config = Config()
    monkeypatch.setattr(os, "environ", {**os.environ, "JUPYTER_PATH": ""})  # the config sets variables
    source = (ROOT / "nbgrader_config.py").read_text()
    exec(
        compile(source, "nbgrader_config.py", "exec"),
        {"get_config": lambda: config, "__file__": str(tmp_path / "nbgrader_config.py")},
    )
    assert config.Execute.kernel_name == kernel_template.NBGRADER_KERNEL
    # The first kernel answers once the template has imported the course: nbgrader waits as long
    # as a notebook may take, not Jupyter's 60 s (a busy machine's first submission was dropped).
    from nbgrader.preprocessors import Execute

    assert Execute(config=config).startup_timeout == DEFAULT_TIMEOUT > 60
    spec = json.loads(
        (tmp_path / "instructor" / "kernels" / kernel_template.NBGRADER_KERNEL / "kernel.json").read_text()
    )
    assert spec["argv"][1:4] == ["-m", "bertlab.kernel_template", "connect-lazily"]
    assert os.environ["JUPYTER_PATH"].split(os.pathsep)[0] == str(tmp_path / "instructor")


def test_a_malformed_request_leaves_the_template_serving(tmp_path):
    """A request that is not JSON is refused in the template itself: before, the fork read it,
    raised, and ran the template's clean-up, which removed the socket every later kernel needs."""
    import socket

    path = str(tmp_path / "template.sock")
    template = kernel_template._spawn_template(path, os.getpid())
    try:
        for _ in range(2):  # the second is answered only after the imports: the first is then handled
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(path)
            socket.send_fds(sock, [b"not json"], [0, 1, 2, 0, 1])
            assert sock.recv(16) == b""  # refused: closed without a kernel's pid
            sock.close()
        time.sleep(0.5)  # a fork that had raised would have removed the socket by now
        assert os.path.exists(path) and template.poll() is None
    finally:
        template.kill()
        template.wait()
