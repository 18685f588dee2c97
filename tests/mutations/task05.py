from tests.mutations import Mutation

NB = "05-feed-forward"
DROPOUT_THEN_ADD = (
    "hidden_states = self.dropout(hidden_states)  # drops part of the update, never the residual\n"
    "        hidden_states = self.LayerNorm(hidden_states + input_tensor)"
)

MUTATIONS = [
    Mutation("tanh-gelu", NB, "nn.GELU()", 'nn.GELU(approximate="tanh")'),
    Mutation("relu-instead-of-gelu", NB, "nn.GELU()", "nn.ReLU()"),
    Mutation("activation-missing", NB, "self.intermediate_act_fn(hidden_states)", "hidden_states"),
    Mutation(
        "residual-missing",
        NB,
        "self.LayerNorm(hidden_states + input_tensor)",
        "self.LayerNorm(hidden_states)",
    ),
    Mutation(
        "dropout-after-layernorm",
        NB,
        DROPOUT_THEN_ADD,
        "hidden_states = self.LayerNorm(hidden_states + input_tensor)\n"
        "        hidden_states = self.dropout(hidden_states)",
    ),
    Mutation(
        "dropout-missing",
        NB,
        DROPOUT_THEN_ADD,
        "hidden_states = self.LayerNorm(hidden_states + input_tensor)",
    ),
]
