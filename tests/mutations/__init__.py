"""Known mistakes injected into copies of the solution notebooks, one module per assignment.

Each module defines ``MUTATIONS``: a list of ``Mutation``. ``old`` must occur exactly once in
the solution cells of the notebook; replacing it with ``new`` must make grading name exactly
``mistake`` (an id of ``bertlab.diagnose.REGISTRY``).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    mistake: str
    notebook: str  # assignment name, e.g. "03-self-attention"
    old: str
    new: str


def all_mutations() -> list[Mutation]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        found += importlib.import_module(f"{__name__}.{info.name}").MUTATIONS
    return found
