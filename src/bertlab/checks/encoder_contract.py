"""The course's contract for an encoder, ``(last_hidden_state, hidden_states)``, on a reference encoder.

Task 6.2's BertEncoder returns a tuple where HF's returns a ModelOutput, and Task 6.4 puts a
reference encoder in the learner's BertModel in place of theirs: the course's own
(``bertlab.bert``, HF's bit for bit) under this contract, in the judge and in a learner's process alike.
"""

from __future__ import annotations

from bertlab import bert


class TupleOutputs:
    """An encoder's forward under the course's contract (mixed in before the encoder's class)."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        """(B, T, H) and an additive mask -> (B, T, H) and num_hidden_layers + 1 tensors (B, T, H)."""
        states = [hidden_states]
        hooks = [block.register_forward_hook(lambda m, args, out: states.append(out)) for block in self.layer]
        try:
            last = super().forward(hidden_states, attention_mask).last_hidden_state  # type: ignore[misc]
        finally:
            for hook in hooks:
                hook.remove()
        return last, tuple(states)


class CourseEncoder(TupleOutputs, bert.BertEncoder):  # type: ignore[misc]  # the contract differs on purpose
    """The course's BertEncoder under the contract: what a learner's process is given."""
