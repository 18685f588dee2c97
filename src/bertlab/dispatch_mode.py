"""The base of the course's dispatch modes: one that does not import torch's compiler.

torch wraps each ``TorchDispatchMode`` subclass's ``__torch_dispatch__`` so that its compiler
(dynamo) skips tracing it, and that wrapper imports ``torch._dynamo`` at its first call: about
2 s, paid by every judge and learner process that checks dropout, for a compiler nothing of the
course runs under these modes. A subclass that says it needs no skipping is left unwrapped
(``_should_skip_dynamo``, the hook torch gives mode authors); ``tests/test_dispatch_mode.py``
fails if torch stops honouring it.
"""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode


class DispatchMode(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False
