"""Benchmark: computing every head's queries, keys and values per head, per role, or fused.

Writes ``bench/results/attention_projections.json``: median seconds and, for each shape,
ratios to "one matrix per role" (what BertSelfAttention does), measured in the same run so a
busy machine slows every variant alike. Usage::

    python bench/attention_projections.py [--rounds N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import torch

from bertlab import reference
from bertlab.experiments.heads import median_times, projection_variants

SHAPES = [(1, 16), (8, 32), (32, 128)]  # (batch, tokens)
BASELINE = "one matrix per role"


def run(rounds: int) -> dict:
    self_attention = reference.load_model().encoder.layer[0].attention.self
    variants = projection_variants(self_attention)
    hidden = reference.load_config().hidden_size
    results = []
    for batch, tokens in SHAPES:
        x = torch.randn(batch, tokens, hidden, generator=torch.Generator().manual_seed(0))
        seconds = median_times(variants, x, rounds=rounds)
        results.append(
            {
                "batch": batch,
                "tokens": tokens,
                "median_seconds": seconds,
                "ratio_to_one_matrix_per_role": {k: v / seconds[BASELINE] for k, v in seconds.items()},
            }
        )
    return {
        "what": "q, k, v for every head of layer 0 of the pretrained model",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "rounds": rounds,
        "shapes": results,
    }


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50, help="timed rounds per variant (default 50)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "attention_projections.json")
    args = parser.parse_args(argv)
    report = run(args.rounds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    for shape in report["shapes"]:
        ratios = ", ".join(f"{k} x{v:.2f}" for k, v in shape["ratio_to_one_matrix_per_role"].items())
        print(f"batch {shape['batch']:>2}, tokens {shape['tokens']:>3}: {ratios}")
    print(f"written to {args.out}")
    return args.out


if __name__ == "__main__":
    main()
