"""Mistakes any task with dropout can make; detected by the dropout check, not by matching outputs."""

from bertlab.diagnose import Mistake, register

register(
    Mistake(
        "dropout-in-eval",
        ("2.1", "3.1", "3.2", "4.1", "4.2", "5.2", "6.1", "6.2", "6.4"),
        "dropout applied in eval mode: two identical calls give different outputs",
        "03-multi-head-attention",
        "Dropout",
    )
)
