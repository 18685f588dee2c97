"""A known mistake's simulation runs once per reference and inputs, and again when either changes."""

from __future__ import annotations

import pytest
import torch

from bertlab.diagnose import simulated


def counting():
    calls = []

    def simulate(module, inputs):
        calls.append(1)
        return {"out": module(inputs["x"])}

    return simulate, calls


def test_the_same_reference_and_inputs_simulate_once():
    simulate, calls = counting()
    layer = torch.nn.Linear(4, 4)
    inputs = lambda: {"x": torch.ones(2, 4), "flag": None, "scale": torch.tensor(0.5)}  # noqa: E731  (0-d too)
    first = simulated.outputs(simulate, "m", layer, inputs())
    again = simulated.outputs(simulate, "m", layer, inputs())  # equal, not the same
    assert len(calls) == 1 and again is first
    simulated.outputs(simulate, "m", layer, {**inputs(), "scale": torch.tensor(0.25)})
    assert len(calls) == 2


def test_other_inputs_another_mistake_or_a_changed_weight_simulate_again():
    simulate, calls = counting()
    layer = torch.nn.Linear(4, 4)
    simulated.outputs(simulate, "m", layer, {"x": torch.ones(2, 4)})
    simulated.outputs(simulate, "m", layer, {"x": torch.ones(2, 4) * 2})
    simulated.outputs(simulate, "other", layer, {"x": torch.ones(2, 4)})
    simulated.outputs(simulate, "m", torch.nn.Linear(4, 4), {"x": torch.ones(2, 4)})  # another module
    with torch.no_grad():
        layer.weight.mul_(2)  # in place: the same tensor, a new version
    after = simulated.outputs(simulate, "m", layer, {"x": torch.ones(2, 4)})
    assert len(calls) == 5
    torch.testing.assert_close(after["out"], layer(torch.ones(2, 4)))


def test_what_it_cannot_key_and_failures_are_never_kept():
    calls = []

    def simulate(module, inputs):
        calls.append(1)
        return {"out": inputs["x"] * 2}

    layer = torch.nn.Linear(4, 4)
    for _ in range(2):
        simulated.outputs(simulate, "m", layer, {"x": torch.ones(1, 4), "other": object()})  # an unknown input
        simulated.outputs(simulate, "m", None, {"x": torch.ones(1, 4)})  # a numpy task's: no module
    assert len(calls) == 4

    def fails(module, inputs):
        calls.append(1)
        raise RuntimeError("a simulation that does not run on these inputs")

    for _ in range(2):
        with pytest.raises(RuntimeError):
            simulated.outputs(fails, "f", layer, {"x": torch.ones(1, 4)})
    assert len(calls) == 6

    def draws(module, inputs):  # dropout in train mode: each call its own mask
        calls.append(1)
        return {"out": torch.nn.functional.dropout(inputs["x"], 0.5, True)}

    torch.manual_seed(0)
    first = simulated.outputs(draws, "d", layer, {"x": torch.ones(1, 64)})["out"]
    second = simulated.outputs(draws, "d", layer, {"x": torch.ones(1, 64)})["out"]
    assert len(calls) == 8 and not torch.equal(first, second)
