"""transformers' BERT objects as the course's own, on their way to a learner's process.

The judge compares with transformers' modules and hands some of them to the learner's code (the
parts of a composite task, the other config). The learner's process cannot read transformers
(``platforms/linux/landlock.py``), so each such object crosses as its counterpart in
``bertlab.bert``: the same class name, the same attributes, and the very same tensors (the state
is moved over as it is, so weights cross once and a grader's mark such as ``harness.given``
goes with them). ``bertlab.bert`` equals transformers' modules output for output, which
``tests/test_course_bert.py`` asserts; ``tests/test_transformers_unreadable.py`` asserts it for what crosses.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from bertlab.checks.harness import GIVEN as _GIVEN

_HF_BERT = "transformers.models.bert.modeling_bert"
_HF_CONFIG = "transformers.models.bert.configuration_bert"
_HF_ACTIVATIONS = "transformers.activations"
# transformers' activation classes -> the ``hidden_act`` name whose function they compute
_ACTIVATION_NAMES = {
    "GELUActivation": "gelu",
    "NewGELUActivation": "gelu_new",
    "GELUTanh": "gelu_pytorch_tanh",
    "PytorchGELUTanh": "gelu_pytorch_tanh",
    "SiLUActivation": "silu",
}


def _course_activation(name: str, marks: dict):
    from bertlab import bert

    activation = bert.ACT2FN[name]
    activation.__dict__.update(marks)  # train mode, and the grader's marks (``harness.given``)
    return activation


def _course_config(values: dict):
    from bertlab import bert

    return bert.BertConfig.from_dict(values)


def reduce(obj, as_module: Callable[[type, nn.Module], tuple]):
    """The pickle reduction of ``obj`` as the course's object, or None when ``obj`` is not
    transformers'. ``as_module(cls, module)`` is the reduction of ``module`` as one of class
    ``cls`` (the wire's: its state without hooks). Anything else of transformers' raises: it could
    not be loaded over there."""
    cls = type(obj)
    learner_side = getattr(cls, "learner_side", None)  # a grader's class built on transformers' (checks)
    if isinstance(learner_side, type) and isinstance(obj, nn.Module):
        return as_module(learner_side, obj)
    home = getattr(cls, "__module__", "") or ""
    if not home.startswith("transformers.") or isinstance(obj, type):
        return None
    if home == _HF_CONFIG:
        return _course_config, (obj.to_dict(),)
    if home == _HF_BERT and isinstance(obj, nn.Module):
        from bertlab import bert

        course = getattr(bert, cls.__name__, None)
        if isinstance(course, type):
            return as_module(course, obj)
    if home == _HF_ACTIVATIONS and cls.__name__ in _ACTIVATION_NAMES:
        marks = {key: value for key, value in obj.__dict__.items() if not key.startswith("_") or key == _GIVEN}
        marks.pop("act", None)  # the function itself: the course's module has its own
        return _course_activation, (_ACTIVATION_NAMES[cls.__name__], marks)
    raise TypeError(
        f"the grader cannot send transformers' {cls.__qualname__} to the learner's process "
        "(it has no counterpart in bertlab.bert)"
    )
