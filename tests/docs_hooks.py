"""The site's hooks (``docs/hooks/*.py``) as modules, for the tests that call them directly."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.conftest import ROOT

HOOKS = ROOT / "docs" / "hooks"


def load_hook(name: str) -> ModuleType:
    """``docs/hooks/<name>.py``, a new module each call (so its module-level state starts empty):
    mkdocs loads hooks by path, and they are no package to import."""
    spec = importlib.util.spec_from_file_location(f"hook_{name}", HOOKS / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"no hook {name} in docs/hooks")
    module = importlib.util.module_from_spec(spec)
    # As mkdocs does: the hook's folder is importable while it loads (hooks share lesson_records).
    sys.path.insert(0, str(HOOKS))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(HOOKS))
    return module
