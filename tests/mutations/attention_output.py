from tests.mutations import Mutation

NB = "04-attention-output"
ADD = "self.LayerNorm(hidden_states + input_tensor)"
CALL_OUTPUT = "self.output(self_output, hidden_states)"
DENSE_THEN_DROPOUT = (
    "hidden_states = self.dense(hidden_states)  # (B, T, H): heads mixed by W_O\n"
    "        hidden_states = self.dropout(hidden_states)  # drops part of the update, never the residual\n"
)

MUTATIONS = [
    Mutation("layernorm-before-residual", NB, ADD, "self.LayerNorm(hidden_states) + input_tensor"),
    Mutation(
        "layernorm-eps-default",
        NB,
        "nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)",
        "nn.LayerNorm(config.hidden_size)",
    ),
    Mutation(
        "layernorm-eps-typed",
        NB,
        "nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)",
        "nn.LayerNorm(config.hidden_size, eps=1e-12)  # BERT's eps",
    ),
    # In BertAttention: the residual is the attention's output instead of its input.
    Mutation("residual-wrong-tensor", NB, CALL_OUTPUT, "self.output(self_output, self_output)"),
    Mutation("attention-output-wrong-order", NB, CALL_OUTPUT, "self.output(hidden_states, self_output)"),
    Mutation(
        "attention-mask-not-passed",
        NB,
        "self.self(hidden_states, attention_mask, **kwargs)",
        "self.self(hidden_states, **kwargs)",
    ),
    # Dropout on the residual sum: every eval-mode check passes, the train-mode one must not.
    Mutation(
        "dropout-on-residual-sum",
        NB,
        "hidden_states = self.dropout(hidden_states)  # drops part of the update, never the residual\n"
        "        hidden_states = self.LayerNorm(hidden_states + input_tensor)",
        "hidden_states = self.LayerNorm(self.dropout(hidden_states + input_tensor))",
    ),
    # Pre-LN, x + dropout(sublayer(norm(x))), as ported from implementations of that order.
    Mutation(
        "pre-ln-order",
        NB,
        DENSE_THEN_DROPOUT + "        hidden_states = " + ADD,
        "hidden_states = input_tensor + self.dropout(self.dense(self.LayerNorm(hidden_states)))",
    ),
    Mutation(
        "dropout-on-sublayer-input",
        NB,
        DENSE_THEN_DROPOUT,
        "hidden_states = self.dense(self.dropout(hidden_states))  # (B, T, H)\n",
    ),
]

# A LayerNorm written by hand, with the statistics mistakes of Task 1.2.
HAND_NORM = (
    "x = hidden_states + input_tensor  # (B, T, H)\n"
    "        mean = x.mean(-1, keepdim=True)\n"
    "        {var}\n"
    "        hidden_states = (x - mean) / {std} * self.LayerNorm.weight + self.LayerNorm.bias"
)
MUTATIONS += [
    Mutation(
        "unbiased-variance",
        NB,
        "hidden_states = " + ADD,
        HAND_NORM.format(
            var="var = x.var(-1, keepdim=True)  # torch's default: unbiased", std="torch.sqrt(var + self.LayerNorm.eps)"
        ),
    ),
    Mutation(
        "layernorm-wrong-axis",
        NB,
        "hidden_states = " + ADD,
        HAND_NORM.replace("mean(-1", "mean(1").format(
            var="var = x.var(1, keepdim=True, unbiased=False)", std="torch.sqrt(var + self.LayerNorm.eps)"
        ),
    ),
]

# Dropout drawn by hand at its place, the kept elements not divided by 1 - p (Task 4.1).
MUTATIONS += [
    Mutation(
        "dropout-not-scaled",
        NB,
        "hidden_states = self.dropout(hidden_states)  # drops part of the update, never the residual\n",
        "if self.training:\n"
        "            hidden_states = hidden_states * (torch.rand_like(hidden_states) > self.dropout.p)\n",
    ),
]
