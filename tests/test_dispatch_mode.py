"""The course's dispatch modes leave torch's compiler unimported (``bertlab.dispatch_mode``).

Each probe is a fresh process, since an import cannot be undone: it runs a dropout under a mode
and says whether ``torch._dynamo`` was imported. The control, a mode without the course's base,
shows the import is still torch's way: were torch to stop wrapping modes, the base would be dead
code, and this test says so."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROBE = textwrap.dedent(
    """
    import sys
    import torch
    {define}
    with mode:
        torch.nn.functional.dropout(torch.ones(4, 4), 0.5, training=True)
    print("torch._dynamo" in sys.modules)
    """
)


def _imports_compiler(define: str) -> bool:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(define=textwrap.dedent(define))], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()[-1] == "True"


def test_the_dropout_checks_mode_imports_no_compiler():
    define = """
    from bertlab.checks.hand_drawn import Coupling
    mode = Coupling(lambda tensor, claimant: None)
    """
    assert not _imports_compiler(define)


def test_a_mode_without_the_course_base_still_imports_it():
    define = """
    from torch.utils._python_dispatch import TorchDispatchMode
    class Plain(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))
    mode = Plain()
    """
    assert _imports_compiler(define), "torch no longer wraps dispatch modes: bertlab.dispatch_mode can go"
