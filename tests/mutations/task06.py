from tests.mutations import Mutation

NB = "06-bert-model"

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
        "extended_attention_mask = (1.0 - keep) * torch.finfo(embedding_output.dtype).min",
        "extended_attention_mask = attention_mask[:, None, None, :].bool()",
    ),
]
