"""Known mistakes in BertEmbeddings (Task 2.1).

Each mistake is simulated by a flawed copy of the reference computation below, run on the
pretrained tables, so a learner whose numbers equal the flawed ones can be told which flaw.
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from bertlab.diagnose import Mistake, register

LESSON = "02-embeddings"
# nn.LayerNorm's eps when none is passed (1e-05): BERT's checkpoints use another.
TORCH_LAYER_NORM_EPS = inspect.signature(nn.LayerNorm).parameters["eps"].default


def embeddings(
    module,
    input_ids=None,
    token_type_ids=None,
    position_ids=None,
    inputs_embeds=None,
    past_key_values_length=0,
    flaw=None,
    **kwargs,
):
    """HF's BertEmbeddings.forward (eval mode) on ``module``'s weights, with an optional flaw.

    Args:
        module: a BertEmbeddings holding the pretrained tables.
        input_ids, token_type_ids, position_ids: (B, T) or None.
        inputs_embeds: (B, T, H) or None, used instead of looking up ``input_ids``.

    Returns:
        ``{"embeddings": (B, T, H)}``, or ``{}`` when the flaw cannot be simulated on these inputs
        (positions shifted past the end of the table).
    """
    words = module.word_embeddings(input_ids) if inputs_embeds is None else inputs_embeds  # (B, T, H)
    B, T = words.shape[:2]
    if position_ids is None:
        start = past_key_values_length + (1 if flaw == "position-ids-off-by-one" else 0)
        if start + T > module.position_embeddings.num_embeddings:
            return {}
        position_ids = torch.arange(start, start + T)[None, :]  # (1, T), broadcast over the batch
    if token_type_ids is None or flaw == "token-types-always-zero":
        token_type_ids = torch.zeros(B, T, dtype=torch.long)
    x = words + module.position_embeddings(position_ids)
    if flaw != "token-types-ignored":
        x = x + module.token_type_embeddings(token_type_ids)
    if flaw == "embeddings-layernorm-eps-default":
        ln = module.LayerNorm
        x = nn.functional.layer_norm(x, ln.normalized_shape, ln.weight, ln.bias, TORCH_LAYER_NORM_EPS)
    elif flaw != "embeddings-no-layernorm":
        x = module.LayerNorm(x)
    return {"embeddings": x}


def _flawed(flaw):
    def outputs(module, inputs):
        return embeddings(module, **inputs, flaw=flaw)

    return outputs


for _id, _description, _section in [
    (
        "position-ids-off-by-one",
        "default position ids 1..T instead of 0..T-1: every token gets the next position's embedding",
        "Defaults: positions and token types",
    ),
    (
        "token-types-ignored",
        "word + position embeddings only: the token-type embedding is never added",
        "The equation",
    ),
    (
        "token-types-always-zero",
        "token type 0 everywhere: the `token_type_ids` passed in are replaced by zeros",
        "Defaults: positions and token types",
    ),
    (
        "embeddings-no-layernorm",
        "the sum of the three embeddings WITHOUT the LayerNorm",
        "The embeddings by hand",
    ),
    (
        "embeddings-layernorm-eps-default",
        f"the embeddings' LayerNorm with torch's default eps={TORCH_LAYER_NORM_EPS:g} instead of config.layer_norm_eps",
        "The embeddings by hand",
    ),
]:
    register(Mistake(_id, ("2.1",), _description, LESSON, _section, _flawed(_id)))
