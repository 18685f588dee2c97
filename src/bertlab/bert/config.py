"""BertConfig: the hyperparameters of a BERT, read from a model directory's ``config.json``.

A plain class (picklable, comparable) standing in for ``transformers.BertConfig``. Every key of the
JSON becomes an attribute; keys the JSON leaves out take the defaults transformers' BertConfig has,
and the few computed attributes code reads (``num_labels``, ``use_return_dict``, ``name_or_path``,
``_attn_implementation``) give what transformers gives.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import torch

# transformers' BertConfig defaults, in its to_dict() order (its base class's fields, then BERT's).
# id2label and label2id follow from num_labels (2), set in __init__.
DEFAULTS: dict[str, Any] = {
    "transformers_version": None,
    "architectures": None,
    "output_hidden_states": False,
    "return_dict": True,
    "dtype": None,
    "chunk_size_feed_forward": 0,
    "is_encoder_decoder": False,
    "id2label": None,
    "label2id": None,
    "problem_type": None,
    "vocab_size": 30522,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
    "pad_token_id": 0,
    "use_cache": True,
    "classifier_dropout": None,
    "is_decoder": False,
    "add_cross_attention": False,
    "bos_token_id": None,
    "eos_token_id": None,
    "tie_word_embeddings": True,
    "_name_or_path": "",
    "output_attentions": False,
}

# The only attention these modules compute: scores, softmax and dropout written out in torch, the
# one implementation that returns the attention probabilities.
ATTN_IMPLEMENTATION = "eager"


class BertConfig:
    """BERT's hyperparameters; ``BertConfig(hidden_size=32, ...)`` or ``BertConfig.from_json_file(path)``."""

    model_type = "bert"

    # Set in __init__ from DEFAULTS and the JSON; annotated for type checkers.
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_act: Any
    hidden_dropout_prob: float
    attention_probs_dropout_prob: float
    max_position_embeddings: int
    type_vocab_size: int
    initializer_range: float
    layer_norm_eps: float
    pad_token_id: int | None
    chunk_size_feed_forward: int
    is_decoder: bool
    add_cross_attention: bool
    return_dict: bool
    output_attentions: bool
    output_hidden_states: bool
    dtype: Any
    id2label: dict[int, str] | None
    label2id: dict[str, int] | None
    _name_or_path: str

    def __init__(self, **kwargs: Any) -> None:
        kwargs = dict(kwargs)
        num_labels = kwargs.pop("num_labels", None)
        # Older files name the dtype torch_dtype; a dtype given as well wins, as in transformers.
        torch_dtype = kwargs.pop("torch_dtype", None)
        attn_implementation = kwargs.pop("attn_implementation", None)
        kwargs.pop("_attn_implementation", None)
        kwargs.pop("model_type", None)  # a class attribute, as in transformers
        kwargs.pop("name_or_path", None)
        for internal in ("_attn_implementation_internal", "_commit_hash"):  # never read from a file, as in transformers
            kwargs.pop(internal, None)
        for key, value in DEFAULTS.items():
            setattr(self, key, copy.deepcopy(value))
        for key, value in kwargs.items():
            setattr(self, key, value)
        if self.dtype is None:
            self.dtype = torch_dtype
        if isinstance(self.dtype, str):
            self.dtype = getattr(torch, self.dtype)  # "float32" -> torch.float32, as transformers reads it
        if self.id2label is None:
            self.num_labels = num_labels if num_labels is not None else 2
        else:
            self.id2label = {int(key): value for key, value in self.id2label.items()}  # JSON keys are strings
        self._attn_implementation = attn_implementation

    # -- reading and writing ------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any) -> BertConfig:
        return cls(**{**config_dict, **kwargs})

    @classmethod
    def from_json_file(cls, json_file: str | os.PathLike) -> BertConfig:
        return cls.from_dict(json.loads(Path(json_file).read_text(encoding="utf-8")))

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, **kwargs: Any) -> BertConfig:
        """The config of a model directory (its ``config.json``); ``kwargs`` override its values."""
        config = cls.from_dict(json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8")), **kwargs)
        config._name_or_path = str(model_dir)
        return config

    def to_dict(self) -> dict[str, Any]:
        """Every attribute, JSON-ready (the dtype as its name), plus ``model_type``."""
        output = copy.deepcopy(self.__dict__)
        output["model_type"] = self.model_type
        if isinstance(output.get("dtype"), torch.dtype):
            output["dtype"] = str(output["dtype"]).split(".")[1]
        return output

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def update(self, config_dict: dict[str, Any]) -> None:
        for key, value in config_dict.items():
            setattr(self, key, value)

    def get_text_config(self, *args: Any, **kwargs: Any) -> BertConfig:
        return self  # a BERT is text only; transformers' helpers ask any config for its text part

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BertConfig) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable and compared by value, like transformers' config

    def __repr__(self) -> str:
        return f"{type(self).__name__} {self.to_json_string()}"

    # -- computed attributes, as transformers' config has them ----------------------------------------

    @property
    def _attn_implementation(self) -> str:
        return ATTN_IMPLEMENTATION

    @_attn_implementation.setter
    def _attn_implementation(self, value: str | None) -> None:
        if value not in (None, ATTN_IMPLEMENTATION):
            raise NotImplementedError(
                f"attn_implementation={value!r} is not supported: the course's BERT computes attention "
                f"one way, {ATTN_IMPLEMENTATION!r} (scores, softmax and dropout written out in torch)."
            )

    @property
    def num_labels(self) -> int | None:
        return len(self.id2label) if self.id2label is not None else None

    @num_labels.setter
    def num_labels(self, num_labels: int) -> None:
        if self.id2label is None or self.num_labels != num_labels:
            self.id2label = {i: f"LABEL_{i}" for i in range(num_labels)}
            self.label2id = {label: i for i, label in self.id2label.items()}

    @property
    def use_return_dict(self) -> bool:
        return self.return_dict  # the older name of return_dict

    @property
    def name_or_path(self) -> str:
        return self._name_or_path

    @name_or_path.setter
    def name_or_path(self, value: str | os.PathLike) -> None:
        self._name_or_path = str(value)

    @property
    def torch_dtype(self) -> torch.dtype | None:
        return self.dtype  # the older name of dtype

    @torch_dtype.setter
    def torch_dtype(self, value: torch.dtype | None) -> None:
        self.dtype = value


def require_encoder(config: BertConfig) -> None:
    """Refuse the settings that turn BERT into a decoder: these modules implement the encoder only."""
    for name in ("is_decoder", "add_cross_attention"):
        if getattr(config, name, False):
            raise NotImplementedError(
                f"config.{name}=True is not supported: the course's BERT is an encoder "
                "(no causal mask, cross-attention or key/value cache)."
            )
