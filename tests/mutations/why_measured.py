from tests.mutations import Mutation

NB = "07-why-measured"

_LAYER_TAIL = """    h = attention.output.LayerNorm(hidden_states + a if attention_skip else a)  # (B, T, H)
    if not ffn:
        return h  # a removed block is the identity: its LayerNorm goes with it
    f = layer.output.dense(layer.intermediate(h))  # (B, T, I) -> (B, T, H)
    return layer.output.LayerNorm(h + f if ffn_skip else f)  # (B, T, H)"""

_POOL = "mean = (hidden * real).sum(1) / real.sum(1)  # (B, H): mean over real tokens"
_RATIO = "return residual.flatten(1).norm(dim=-1) / X.flatten(1).norm(dim=-1)"

MUTATIONS = [
    Mutation(
        "residual-includes-padding",
        NB,
        "real = attention_mask[..., None].to(hidden_states.dtype)  # (B, T, 1): 1 on real tokens",
        "real = torch.ones_like(hidden_states[..., :1])  # (B, T, 1)",
    ),
    Mutation(
        "residual-mean-includes-padding",
        NB,
        "mean = (hidden_states * real).sum(1, keepdim=True) / n",
        "mean = hidden_states.mean(1, keepdim=True)",
    ),
    Mutation(
        "residual-norm-includes-padding", NB, "X = hidden_states * real  # (B, T, H)", "X = hidden_states  # (B, T, H)"
    ),
    Mutation("residual-not-relative", NB, _RATIO, "return residual.flatten(1).norm(dim=-1)"),
    Mutation(
        "residual-mean-over-features",
        NB,
        "mean = (hidden_states * real).sum(1, keepdim=True) / n",
        "mean = hidden_states.mean(-1, keepdim=True)",
    ),
    Mutation(
        "residual-squared-norms", NB, _RATIO, "return residual.flatten(1).pow(2).sum(-1) / X.flatten(1).pow(2).sum(-1)"
    ),
    Mutation(
        "variant-skip-kept",
        NB,
        "attention.output.LayerNorm(hidden_states + a if attention_skip else a)",
        "attention.output.LayerNorm(hidden_states + a)",
    ),
    Mutation(
        "variant-ffn-skip-kept", NB, "layer.output.LayerNorm(h + f if ffn_skip else f)", "layer.output.LayerNorm(h + f)"
    ),
    Mutation(
        "skip-removed-layernorm-dropped",
        NB,
        _LAYER_TAIL,
        """    h = attention.output.LayerNorm(hidden_states + a) if attention_skip else a
    if not ffn:
        return h
    f = layer.output.dense(layer.intermediate(h))
    return layer.output.LayerNorm(h + f) if ffn_skip else f""",
    ),
    Mutation(
        "removed-ffn-keeps-layernorm",
        NB,
        "return h  # a removed block",
        "return layer.output.LayerNorm(h)  # a removed block",
    ),
    Mutation("cosine-not-normalised", NB, "return F.normalize(mean, dim=-1)", "return mean"),
    Mutation("pooling-includes-padding", NB, _POOL, "mean = hidden.mean(1)  # (B, H)"),
    Mutation("cls-pooling", NB, _POOL, "mean = hidden[:, 0]  # (B, H)"),
    Mutation("lesion-in-every-layer", NB, "flags if i == lesioned else {}", "flags if lesioned is not None else {}"),
]
