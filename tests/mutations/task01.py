from tests.mutations import Mutation

NB = "01-numpy-bert"

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
        "return (0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))).astype(x.dtype)",
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
]
