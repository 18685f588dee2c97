"""The pretrained model, its config and its tokenizer, read from the model directory by these modules alone.

The same directory ``bertlab.reference`` resolves (the argument, ``$BERTLAB_MODEL``, else the bundled
all-MiniLM-L6-v2), checked the same way; but the model is this package's BertModel with the
directory's weights loaded into it, not transformers' class. Each is loaded once per process and
directory, like ``bertlab.reference.load_model``.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

from bertlab import model_files
from bertlab.bert.bert_model import BertModel
from bertlab.bert.config import BertConfig
from bertlab.bert.embeddings import BertEmbeddings
from bertlab.bert.tokenizer import BertTokenizer

BASE_MODEL_PREFIX = "bert."  # where BertFor... checkpoints (masked LM, classifiers) keep the BertModel
# Names older checkpoints gave LayerNorm's parameters (TensorFlow's), as transformers renames them.
LEGACY_NAMES = {"LayerNorm.gamma": "LayerNorm.weight", "LayerNorm.beta": "LayerNorm.bias"}
# A buffer older transformers saved with the weights; it is rebuilt, never read from a file.
SAVED_BUFFERS = {"embeddings.position_ids"}


def load_config(model: str | os.PathLike | None = None) -> BertConfig:
    """The model's BertConfig: the loaded model's own if this process loaded it, else read from config.json."""
    path = model_files.model_dir(model)
    if path in _loaded:
        return load_model(path).config
    return _load_config(path)


def load_model(model: str | os.PathLike | None = None) -> BertModel:
    """The pretrained BertModel: float32, eval mode, weights frozen; cached per process and directory."""
    return _load_model(model_files.model_dir(model))


def is_loaded() -> bool:
    """Whether this process has loaded a pretrained model already (loading takes a fraction of a second)."""
    return _load_model.cache_info().currsize > 0


def load_tokenizer(model: str | os.PathLike | None = None) -> BertTokenizer:
    """The model's tokenizer (tokenizer.json, or vocab.txt, and tokenizer_config.json)."""
    return _load_tokenizer(model_files.model_dir(model))


_loaded: set[Path] = set()  # directories whose model this process holds


@functools.cache
def _load_config(path: Path) -> BertConfig:
    model_files.validate(path)
    config = BertConfig.from_pretrained(path)
    config.dtype = torch.float32  # the dtype the model is loaded in, as the reference records it
    return config


@functools.cache
def _load_model(path: Path) -> BertModel:
    config = _load_config(path)
    with _NoDraws():  # no weights drawn, no memory written: each one is loaded below
        model = BertModel(config)
    weights = model_files.weights_file(path)
    missing, unexpected = _load_strictly(model, _base_model_weights(weights, set(model.state_dict())))
    if missing or unexpected:
        raise model_files.ReferenceError(
            f"{weights} does not hold a BertModel's weights: "
            f"missing {missing or 'none'}, unknown {unexpected or 'none'}."
            "\n  Fix: save the BertModel itself (`model.save_pretrained(dir)`), with its pooler."
        )
    model.to(torch.float32)
    model.eval()
    model.requires_grad_(False)
    _loaded.add(path)
    return model


class _NoDraws(TorchFunctionMode):
    """While the model is built, its random fills are skipped: the loading that follows replaces
    every weight, so the fresh tensors' pages are never written (drawing 22 M numbers was most of
    what building took). Built on the CPU, not on the meta device: torch fills and builds meta
    tensors through its Python reference kernels, whose first calls import its compiler and
    sympy (1.4 s of the 1.8 s a process took to load the model)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _RANDOM_FILLS or getattr(func, "__module__", None) == "torch.nn.init":
            return kwargs["tensor"] if "tensor" in kwargs else args[0]
        return func(*args, **kwargs)


_RANDOM_FILLS = (torch.Tensor.normal_, torch.Tensor.uniform_)


def _load_strictly(model: BertModel, state: dict[str, torch.Tensor]) -> tuple[list[str], list[str]]:
    """Load ``state`` into ``model`` if the names match exactly; the names it lacks and those it has too many."""
    expected = set(model.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if not missing and not unexpected:
        # The checkpoint's tensors themselves, not copies: copying 90 MB would run torch's thread
        # pool, and a learner template forked after that hangs in its first parallel op.
        model.load_state_dict(state, strict=True, assign=True)
        for module in model.modules():  # buffers the checkpoint does not hold: built as the class builds them
            if isinstance(module, BertEmbeddings):
                module.position_ids, module.token_type_ids = BertEmbeddings.position_buffers(model.config)
    return missing, unexpected


def _base_model_weights(weights: Path, expected: set[str]) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors under BertModel's names.

    A BertModel checkpoint's names are used as they are; a BertFor... checkpoint's BertModel is
    the part under ``bert.`` (its task head is not BertModel's). What remains must then match
    BertModel's names exactly (_load_strictly).
    """
    if weights.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(weights)
    else:
        state = torch.load(weights, map_location="cpu", weights_only=True)
    if not expected & set(state) and any(name.startswith(BASE_MODEL_PREFIX) for name in state):
        state = {name[len(BASE_MODEL_PREFIX) :]: t for name, t in state.items() if name.startswith(BASE_MODEL_PREFIX)}
    renamed = {_modern_name(name): tensor for name, tensor in state.items()}
    return {name: tensor for name, tensor in renamed.items() if name not in SAVED_BUFFERS}


def _modern_name(name: str) -> str:
    for old, new in LEGACY_NAMES.items():
        if name.endswith(old):
            return name[: -len(old)] + new
    return name


@functools.cache
def _load_tokenizer(path: Path) -> BertTokenizer:
    model_files.validate(path)
    try:
        return BertTokenizer.from_pretrained(path)
    except FileNotFoundError as err:
        raise model_files.ReferenceError(
            f"{path} has no tokenizer files.\n  Fix: also run `tokenizer.save_pretrained(dir)` there."
        ) from err
