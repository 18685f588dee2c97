"""The site's hooks (``docs/hooks/*.py``) as modules, for the tests that call them directly."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from tests.conftest import ROOT


def load_hook(name: str) -> ModuleType:
    """``docs/hooks/<name>.py``, a new module each call (so its module-level state starts empty):
    mkdocs loads hooks by path, and they are no package to import."""
    spec = importlib.util.spec_from_file_location(f"hook_{name}", ROOT / "docs" / "hooks" / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"no hook {name} in docs/hooks")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
