from tests.mutations import Mutation

NB = "03-self-attention"

MUTATIONS = [
    Mutation("no-scaling", NB, "(query @ key.transpose(-1, -2)) * scaling", "(query @ key.transpose(-1, -2))"),
    Mutation("softmax-wrong-axis", NB, "torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)"),
    Mutation("mask-ignored", NB, "scores = scores + attention_mask", "scores = scores"),
    Mutation("mask-multiplied", NB, "scores = scores + attention_mask", "scores = scores * attention_mask"),
    Mutation("mask-wrong-sign", NB, "scores = scores + attention_mask", "scores = scores - attention_mask"),
    Mutation(
        "heads-split-wrong",
        NB,
        "x.view(B, T, self.num_attention_heads, self.attention_head_size).transpose(1, 2)",
        "x.view(B, self.num_attention_heads, T, self.attention_head_size)",
    ),
    Mutation("dropout-in-eval", NB, "training=module.training)", "training=True)"),
]
