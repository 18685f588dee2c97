"""Whether a learner's BertSelfAttention calls their eager_attention_forward, and with what.

A mistake Task 3.1 can make (no scaling, say) may show in Task 3.2's output because 3.2 calls the
learner's 3.1 function, or because 3.2's own code makes it. The message should blame the right
one: the module's forward is run once more, in the process where it lives, under a profile hook
that records the first call of ``eager_attention_forward``, its arguments and its answer; the
judge then compares that answer with HF's function on the same arguments.
"""

from __future__ import annotations

import sys

import torch
from torch import nn

from bertlab import diagnose
from bertlab.checks.compare import allclose
from bertlab.checks.harness import invoke_beside, reference_code

EAGER = "eager_attention_forward"


def eager_call_seen(module, inputs: dict) -> dict | None:
    """Whether ``module``'s forward on ``inputs`` calls the learner's eager_attention_forward, with
    what arguments (by position, tensors and numbers only) and what it returned; None if the
    watch could not run. Runs in the learner's process when the module lives there."""
    outcome = invoke_beside(module, watch_eager_call, (module, inputs))
    return outcome.value if outcome.kind == "ok" else None


def watch_eager_call(module, inputs: dict) -> dict:
    """``module(**inputs)`` with a profile hook that notes the first call of eager_attention_forward:
    the notebook's function of that name (any alias of it), or any function so named outside
    reference code (transformers', the course's own given parts)."""
    target = getattr(getattr(type(module), "forward", None), "__globals__", {}).get(EAGER)
    code = getattr(target, "__code__", None)
    seen: dict = {"called": False, "args": [], "returned": None}
    frames = []

    def plain(value):
        if isinstance(value, torch.Tensor):
            return value.detach().clone()
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        return value if isinstance(value, (int, float, bool, type(None))) else None

    def profile(frame, event, arg):
        is_eager = (
            frame.f_code is code
            if code is not None
            else (frame.f_code.co_name == EAGER and not reference_code(frame.f_code.co_filename))
        )
        if not is_eager:
            return
        if event == "call" and not seen["called"]:
            seen["called"] = True
            names = frame.f_code.co_varnames[: frame.f_code.co_argcount]
            seen["args"] = [plain(frame.f_locals.get(n)) for n in names]
            frames.append(frame)
        elif event == "return" and frames and frame is frames[0]:
            seen["returned"] = plain(arg)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        module(**inputs)
    finally:
        sys.setprofile(previous)
    return seen


def answers_as_hf(args: list, returned) -> bool:
    """Whether the learner's eager_attention_forward returned what HF's returns on ``args``
    (module, query, key, value, attention_mask, scaling, dropout, by position)."""
    if len(args) < 5 or not isinstance(returned, list) or len(returned) != 2:
        return False
    query, key, value, mask = args[1:5]
    scaling = args[5] if len(args) > 5 else None
    if not all(isinstance(t, torch.Tensor) for t in (query, key, value)):
        return False
    with torch.no_grad():
        expected = hf_eager_attention_forward()(Training().eval(), query, key, value, mask, scaling=scaling)
    return all(
        isinstance(g, torch.Tensor) and g.shape == e.shape and allclose(e, g, diagnose.MATCH_ATOL)
        for g, e in zip(returned, expected, strict=True)
    )


class Training(nn.Module):
    """Stands in for the ``module`` argument: HF's function reads only ``module.training``."""


def hf_eager_attention_forward():
    """HF's function as the course's own copy computes it, bit for bit (``tests/test_judge_reference.py``)."""
    from bertlab.bert import eager_attention_forward

    return eager_attention_forward
