from tests.mutations import Mutation

NB = "01-numpy-bert"
# The end of the solution's bert_layer_forward: both Add & Norms and the feed-forward between them.
TAIL = """    attention_output = layer_norm(
        dense(context, "attention.output.dense") + hidden_states,
        params["attention.output.LayerNorm.weight"], params["attention.output.LayerNorm.bias"], eps,
    )
    intermediate = gelu(dense(attention_output, "intermediate.dense"))  # (B, T, intermediate_size)
    # Second Add & Norm: the residual is the attention block's output.
    return layer_norm(
        dense(intermediate, "output.dense") + attention_output,
        params["output.LayerNorm.weight"], params["output.LayerNorm.bias"], eps,
    )"""
SECOND_ADD_NORM = TAIL[TAIL.index("    return layer_norm(") :]

MUTATIONS = [
    Mutation("softmax-unstable", NB, "shifted = x - np.max(x, axis=axis, keepdims=True)", "shifted = x"),
    Mutation("softmax-wrong-axis-numpy", NB, "    shifted = x - np.max(", "    axis = 0\n    shifted = x - np.max("),
    Mutation("unbiased-variance", NB, "np.var(x, axis=-1, keepdims=True)", "np.var(x, axis=-1, keepdims=True, ddof=1)"),
    Mutation("layernorm-eps-missing", NB, "np.sqrt(var + eps)", "np.sqrt(var)"),
    Mutation("layernorm-eps-outside-sqrt", NB, "np.sqrt(var + eps)", "(np.sqrt(var) + eps)"),
    Mutation(
        "tanh-gelu-numpy",
        NB,
        "(1.0 + erf(x / math.sqrt(2.0)))",
        "(1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))",
    ),
    Mutation(
        "relu-instead-of-gelu-numpy",
        NB,
        "return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))  # a Python float keeps float32 float32",
        "return np.maximum(x, 0.0)",
    ),
    Mutation("weight-not-transposed", NB, "x @ weight.T + bias", "x @ weight + bias"),
    Mutation(
        "numpy-layer-no-scaling",
        NB,
        "q @ k.transpose(0, 1, 3, 2) / math.sqrt(head_size)",
        "q @ k.transpose(0, 1, 3, 2)",
    ),
    Mutation("numpy-layer-mask-ignored", NB, "scores = scores + attention_mask", "scores = scores"),
    Mutation(
        "numpy-layer-second-residual-from-input",
        NB,
        'dense(intermediate, "output.dense") + attention_output,',
        'dense(intermediate, "output.dense") + hidden_states,',
    ),
    Mutation(
        "numpy-layer-ffn-fed-layer-input",
        NB,
        'gelu(dense(attention_output, "intermediate.dense"))',
        'gelu(dense(hidden_states, "intermediate.dense"))',
    ),
    # The feed-forward sub-layer once more, on its own output.
    Mutation(
        "numpy-layer-ffn-applied-twice",
        NB,
        SECOND_ADD_NORM,
        SECOND_ADD_NORM.replace("    return layer_norm(", "    attention_output = layer_norm(")
        + '\n    intermediate = gelu(dense(attention_output, "intermediate.dense"))\n'
        + SECOND_ADD_NORM,
    ),
    # Both Add & Norms as layer_norm(sub-layer) + residual.
    Mutation(
        "numpy-layer-layernorm-before-add",
        NB,
        TAIL,
        """    attention_output = layer_norm(
        dense(context, "attention.output.dense"),
        params["attention.output.LayerNorm.weight"], params["attention.output.LayerNorm.bias"], eps,
    ) + hidden_states
    intermediate = gelu(dense(attention_output, "intermediate.dense"))
    return layer_norm(
        dense(intermediate, "output.dense"),
        params["output.LayerNorm.weight"], params["output.LayerNorm.bias"], eps,
    ) + attention_output""",
    ),
]

MUTATIONS += [
    Mutation(
        "layernorm-wrong-axis",
        NB,
        "np.mean(x, axis=-1, keepdims=True)  # (..., 1)\n    var = np.var(x, axis=-1, keepdims=True)",
        "np.mean(x, axis=-2, keepdims=True)\n    var = np.var(x, axis=-2, keepdims=True)",
    ),
]
