from tests.mutations import Mutation

NB = "03-self-attention"

MUTATIONS = [
    Mutation("no-scaling", NB, "(query @ key.transpose(-1, -2)) * scaling", "(query @ key.transpose(-1, -2))"),
    Mutation("softmax-wrong-axis", NB, "torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)"),
    Mutation("mask-ignored", NB, "scores = scores + attention_mask", "scores = scores"),
    Mutation("mask-multiplied", NB, "scores = scores + attention_mask", "scores = scores * attention_mask"),
    Mutation("mask-wrong-sign", NB, "scores = scores + attention_mask", "scores = scores - attention_mask"),
    # Lesson 3's two multiplicative forms, with a 0/1 keep mask made from the additive one.
    Mutation(
        "keep-mask-times-scores",
        NB,
        "scores = scores + attention_mask",
        "scores = scores * (attention_mask == 0).float()",
    ),
    Mutation(
        "keep-mask-times-probs",
        NB,
        "scores = scores + attention_mask  # padding keys get a huge negative score\n"
        "    attn_weights = torch.softmax(scores, dim=-1)",
        "keep = (attention_mask == 0).float()  # 1 for a real key\n"
        "    attn_weights = torch.softmax(scores, dim=-1)\n"
        "    if attention_mask is not None:\n"
        "        attn_weights = attn_weights * keep",
    ),
    Mutation(
        "heads-split-wrong",
        NB,
        "x.view(B, T, self.num_attention_heads, self.attention_head_size).transpose(1, 2)",
        "x.view(B, self.num_attention_heads, T, self.attention_head_size)",
    ),
    Mutation(
        "mask-over-queries",
        NB,
        "scores = scores + attention_mask",
        "scores = scores + attention_mask.transpose(-1, -2)",
    ),
    # The merge: the heads' axis left before the tokens', or the last two axes swapped.
    Mutation(
        "heads-merged-without-transpose",
        NB,
        "context_layer = context_layer.reshape(B, T, self.all_head_size)",
        "context_layer = context_layer.transpose(1, 2).reshape(B, T, self.all_head_size)",
    ),
    Mutation(
        "heads-merged-dims-swapped",
        NB,
        "context_layer = context_layer.reshape(B, T, self.all_head_size)",
        "context_layer = context_layer.transpose(-1, -2).reshape(B, T, self.all_head_size)",
    ),
    Mutation("dropout-in-eval", NB, "training=module.training)", "training=True)"),
    # BertSelfAttention's dropout moved from the attention probabilities to the context layer.
    Mutation(
        "attention-dropout-on-context",
        NB,
        "dropout=self.dropout.p if self.training else 0.0,\n        )\n"
        "        context_layer = context_layer.reshape(B, T, self.all_head_size)",
        "dropout=0.0,\n        )\n"
        "        context_layer = self.dropout(context_layer.reshape(B, T, self.all_head_size))",
    ),
]
