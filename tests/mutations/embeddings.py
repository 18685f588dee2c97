from tests.mutations import Mutation

NB = "02-embeddings"

MUTATIONS = [
    Mutation(
        "position-ids-off-by-one",
        NB,
        "self.position_ids[:, past_key_values_length : past_key_values_length + T]",
        "self.position_ids[:, past_key_values_length + 1 : past_key_values_length + T + 1]",
    ),
    Mutation(
        "token-types-ignored",
        NB,
        "embeddings = inputs_embeds + self.token_type_embeddings(token_type_ids)",
        "embeddings = inputs_embeds",
    ),
    Mutation("token-types-always-zero", NB, "if token_type_ids is None:", "if True:"),
    Mutation("embeddings-no-layernorm", NB, "embeddings = self.LayerNorm(embeddings)\n", "embeddings = embeddings\n"),
    Mutation(
        "embeddings-layernorm-eps-default",
        NB,
        "nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)",
        "nn.LayerNorm(config.hidden_size)",
    ),
    Mutation(
        "embeddings-dropout-before-layernorm",
        NB,
        "embeddings = self.LayerNorm(embeddings)\n        embeddings = self.dropout(embeddings)",
        "embeddings = self.LayerNorm(self.dropout(embeddings))",
    ),
    # "Locked" dropout: one mask per sentence over the features, shared by every position.
    Mutation(
        "dropout-mask-shared",
        NB,
        "        embeddings = self.dropout(embeddings)\n",
        "        embeddings = embeddings * self.dropout(torch.ones_like(embeddings[:, :1]))  # (B, 1, H)\n",
    ),
]
