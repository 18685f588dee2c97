"""A task whose learner object is an ``nn.Module`` class mirroring one of HF's: the stage families together."""

from __future__ import annotations

from bertlab.checks.stage_arguments import ArgumentChecks
from bertlab.checks.stage_calls import CallChecks
from bertlab.checks.stage_dropout import DropoutChecks
from bertlab.checks.stage_values import ValueChecks


class ModuleTask(ValueChecks, CallChecks, ArgumentChecks, DropoutChecks):
    """A task whose learner object is an ``nn.Module`` class mirroring one of HF's.

    Subclasses name the HF module (``hf_path``), how HF calls it (``captured_inputs``), a random
    input generator and the names of its outputs (``module_base.ModuleBase``).

    Each stage family's checks and their messages are in a file of its own (``stage_values.py``,
    ``stage_calls.py``, ``stage_config.py``, ``stage_arguments.py``, ``stage_dropout.py``,
    ``stage_gradients.py``), on the helpers of ``module_base.py``.
    """
