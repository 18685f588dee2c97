from tests.mutations import Mutation

NB = "06-bert-model"
FFN = "intermediate_output = self.intermediate(attention_output)  # (B, T, I)"
SECOND_RESIDUAL = "layer_output = self.output(intermediate_output, attention_output)  # (B, T, H)"
MASK = "extended_attention_mask = (1.0 - keep) * torch.finfo(embedding_output.dtype).min"

MUTATIONS = [
    Mutation("layer-skips-ffn", NB, "        return layer_output\n", "        return attention_output\n"),
    Mutation(
        "hidden-states-missing-embeddings",
        NB,
        "all_hidden_states = (hidden_states,)  # the input is hidden_states[0]",
        "all_hidden_states = ()",
    ),
    Mutation("pooler-no-tanh", NB, "pooled_output = self.activation(pooled_output)", "pooled_output = pooled_output"),
    Mutation("pooler-wrong-token", NB, "hidden_states[:, 0]  # (B, H)", "hidden_states[:, -1]  # (B, H)"),
    Mutation(
        "encoder-mask-not-applied",
        NB,
        "self.encoder(embedding_output, extended_attention_mask)",
        "self.encoder(embedding_output)",
    ),
    Mutation(
        "bool-mask-added",
        NB,
        MASK,
        "extended_attention_mask = attention_mask[:, None, None, :].bool()",
    ),
    # BertLayer's wiring (lesson 4).
    Mutation(
        "second-residual-from-input",
        NB,
        SECOND_RESIDUAL,
        "layer_output = self.output(intermediate_output, hidden_states)  # (B, T, H)",
    ),
    Mutation("ffn-fed-layer-input", NB, FFN, "intermediate_output = self.intermediate(hidden_states)  # (B, T, I)"),
    Mutation(
        "ffn-applied-twice",
        NB,
        SECOND_RESIDUAL,
        SECOND_RESIDUAL + "\n        layer_output = self.output(self.intermediate(layer_output), layer_output)",
    ),
    # BertModel's mask: the wrong sign, and left at (B, T).
    Mutation(
        "extended-mask-wrong-sign",
        NB,
        MASK,
        "extended_attention_mask = keep * torch.finfo(embedding_output.dtype).min",
    ),
    Mutation(
        "extended-mask-not-broadcast",
        NB,
        "keep = attention_mask[:, None, None, :].to(embedding_output.dtype)  # (B, 1, 1, T)",
        "keep = attention_mask.to(embedding_output.dtype)  # (B, T)",
    ),
]
