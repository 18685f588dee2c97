"""Another BertConfig, sharing no size or id with the pretrained model's, and a random model of it.

The config, arguments and dropout checks build the learner's module from it (``Context.other``): a
size, an eps, a probability or an id typed in as the pretrained model's number shows there. Both
are the course's own classes (``bertlab.bert``), which build and draw what transformers' BertConfig
and BertModel do (``tests/test_judge_reference.py``).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

# Sizes a learner might wire in, by the config field that holds them.
SIZE_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "attention_head_size",
    "num_hidden_layers",
    "vocab_size",
    "max_position_embeddings",
    "type_vocab_size",
)


def config_sizes(config) -> dict[str, int]:
    """``SIZE_FIELDS`` of ``config``; the head size is ``hidden_size // num_attention_heads``."""
    # In SIZE_FIELDS' order: _config_key's values are read back by that order (_PretrainedSizes).
    head_size = config.hidden_size // config.num_attention_heads
    return {f: head_size if f == "attention_head_size" else getattr(config, f) for f in SIZE_FIELDS}


def _config_key(config) -> tuple:
    return (
        *config_sizes(config).values(),
        config.layer_norm_eps,
        config.hidden_dropout_prob,
        config.attention_probs_dropout_prob,
        config.pad_token_id,
    )


def _differs(options, taken) -> Any:
    """The first of ``options`` not in ``taken``: every size differs from the pretrained model's."""
    return next(o for o in options if o not in taken)


def other_config(config):
    """A BertConfig that shares no size or id with ``config`` (the pretrained model's).

    The hidden size, the number of heads and the head size all differ; the FFN is not 4x the
    hidden size; eps is large enough to move the outputs; the dropout probabilities and the
    ``pad_token_id`` differ too.
    """
    from bertlab.bert import BertConfig

    old = config_sizes(config)
    hidden, heads = next(
        (h, n)
        for h, n in [(48, 3), (60, 5), (42, 7)]
        if h != old["hidden_size"] and n != old["num_attention_heads"] and h // n != old["attention_head_size"]
    )
    intermediate = next(i for i in (hidden * 5 // 3, hidden * 2 + 6) if i not in (4 * hidden, old["intermediate_size"]))
    return BertConfig(
        hidden_size=hidden,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        num_hidden_layers=_differs((3, 2, 4), (old["num_hidden_layers"],)),
        vocab_size=_differs((101, 97), (old["vocab_size"],)),
        max_position_embeddings=_differs((40, 36), (old["max_position_embeddings"],)),
        type_vocab_size=_differs((3, 4), (old["type_vocab_size"],)),
        layer_norm_eps=_differs((0.1, 0.2), (config.layer_norm_eps,)),
        hidden_dropout_prob=_differs((0.2, 0.3), (config.hidden_dropout_prob,)),
        attention_probs_dropout_prob=_differs((0.3, 0.4), (config.attention_probs_dropout_prob,)),
        hidden_act=config.hidden_act,
        # the [PAD] row too: a padding_idx wired to the pretrained 0 shows in the word table's gradient
        pad_token_id=_differs((1, 2), (config.pad_token_id,)),
        attn_implementation="eager",
    )


@functools.lru_cache(maxsize=2)
def _random_model(key: tuple):
    """The course's BertModel of ``other_config`` with random weights, in eval mode, frozen.

    Every parameter is random, LayerNorm's weights and biases and every bias included (HF would
    start them at 1 and 0), so a missing bias or affine, or a wrong eps, changes the outputs.
    """
    from bertlab.bert import BertModel

    return randomised(BertModel, other_config(_PretrainedSizes(key)))


def randomised(model_class, config):
    """``model_class(config)`` with every parameter drawn from seed 0 in its named order, in eval
    mode, frozen: the parity test draws transformers' BertModel alike."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = model_class(config)
        with torch.no_grad():
            for name, param in model.named_parameters():
                base = 1.0 if name.endswith("LayerNorm.weight") else 0.0
                param.copy_(base + 0.5 * torch.randn(param.shape))
    return model.eval().requires_grad_(False)


class _PretrainedSizes:
    """The fields of the pretrained config that ``other_config`` reads, rebuilt from ``_config_key``."""

    def __init__(self, key: tuple):
        sizes = dict(zip(SIZE_FIELDS, key[: len(SIZE_FIELDS)], strict=True))
        self.hidden_size, self.intermediate_size = sizes["hidden_size"], sizes["intermediate_size"]
        self.num_attention_heads, self.num_hidden_layers = sizes["num_attention_heads"], sizes["num_hidden_layers"]
        self.vocab_size, self.max_position_embeddings = sizes["vocab_size"], sizes["max_position_embeddings"]
        self.type_vocab_size = sizes["type_vocab_size"]
        (
            self.layer_norm_eps,
            self.hidden_dropout_prob,
            self.attention_probs_dropout_prob,
            self.pad_token_id,
        ) = key[len(SIZE_FIELDS) :]
        self.hidden_act = "gelu"


def describe_config(config) -> str:
    sizes = config_sizes(config)
    return (
        f"hidden_size {sizes['hidden_size']}, {sizes['num_attention_heads']} heads of size "
        f"{sizes['attention_head_size']}, intermediate_size {sizes['intermediate_size']}, "
        f"layer_norm_eps {config.layer_norm_eps:g}, {sizes['num_hidden_layers']} layers, "
        f"vocab_size {sizes['vocab_size']}, max_position_embeddings {sizes['max_position_embeddings']}"
    )
