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

# A LayerNorm written by hand with eps added to the standard deviation, as in Task 1.2's mistake.
MUTATIONS += [
    Mutation(
        "layernorm-eps-outside-sqrt",
        NB,
        "hidden_states = self.LayerNorm(hidden_states + input_tensor)",
        "x = hidden_states + input_tensor  # (B, T, H)\n"
        "        mean, var = x.mean(-1, keepdim=True), x.var(-1, keepdim=True, unbiased=False)\n"
        "        hidden_states = (x - mean) / (var.sqrt() + self.LayerNorm.eps) * self.LayerNorm.weight "
        "+ self.LayerNorm.bias",
    ),
]

# self.dropout applied twice at its place (Task 5.2): p drops become 1 - (1 - p)^2, scaled twice.
MUTATIONS += [
    Mutation(
        "dropout-applied-twice",
        NB,
        "hidden_states = self.dropout(hidden_states)  # drops part of the update, never the residual",
        "hidden_states = self.dropout(self.dropout(hidden_states))",
    ),
]
