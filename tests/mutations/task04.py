from tests.mutations import Mutation

NB = "04-attention-output"
ADD = "self.LayerNorm(hidden_states + input_tensor)"
CALL_OUTPUT = "self.output(self_output, hidden_states)"

MUTATIONS = [
    Mutation("layernorm-before-residual", NB, ADD, "self.LayerNorm(hidden_states) + input_tensor"),
    Mutation(
        "layernorm-eps-default",
        NB,
        "nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)",
        "nn.LayerNorm(config.hidden_size)",
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
]
