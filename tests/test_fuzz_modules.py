"""Property-based tests of the module checks: batch size, length and padding drawn by hypothesis.

Two properties, for every module task (2.1, 3.2, 4.1, 4.2, 5.1, 5.2, 6.1 to 6.4):

- a learner-style right implementation (the solution notebook's class, not transformers' own)
  loaded with the pretrained weights agrees with HF's module on any drawn batch, within the
  task's tolerance, compared the way the checks compare;
- the random-input generators the checks use produce only valid inputs (ids in range, masks
  of 0 and the most negative float with at least one key kept, right-padded 0/1 masks, finite
  float32 tensors of the sizes the module expects), on the pretrained config and on the other
  config of the ``config`` check, and HF's own module runs on them to finite outputs.

Hypothesis draws the shapes; the tensor contents come from a drawn seed, so an example that
fails is reproduced exactly from what hypothesis prints.
"""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertlab.checks import TASKS
from bertlab.checks.compare import allclose
from bertlab.checks.framework import Context
from bertlab.checks.module_task import ModuleTask
from bertlab.masks import additive_mask
from tests.conftest import solution_namespace

MODULE_TASKS = ["2.1", "3.2", "4.1", "4.2", "5.1", "5.2", "6.1", "6.2", "6.3", "6.4"]

# A few seconds per task: shapes are small, each example runs the module twice.
FUZZ = settings(
    max_examples=12,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@functools.cache
def context() -> Context:
    """The checks' context: the pretrained model, its capture and config."""
    return Context.load(0)


@functools.cache
def solution() -> dict:
    """The solution notebook's classes: learner-style code, all of Tasks 2.1 to 6.4."""
    return solution_namespace("06-bert-model")


# -- drawing a batch ---------------------------------------------------------------------------


@st.composite
def batches(draw, max_batch: int = 4, max_length: int = 24) -> dict:
    """(B, T), the real length of each sequence (at least one, and one of them, anywhere in the
    batch, of length T, as in a tokenizer's padded batch), the mask form, whether token types
    are given, and a seed for the tensor contents."""
    B = draw(st.integers(1, max_batch))
    T = draw(st.integers(1, max_length))
    lengths = draw(st.lists(st.integers(1, T), min_size=B, max_size=B))
    lengths[draw(st.integers(0, B - 1))] = T  # the longest sequence sets T: it has no padding
    return {
        "B": B,
        "T": T,
        "lengths": lengths,
        "mask": draw(st.sampled_from(["none", "per_query", "per_key"])),
        "token_types": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**31 - 1)),
    }


def padding(b: dict) -> torch.Tensor:
    """(B, T) 0/1: 1 on each sequence's real tokens, right-padded."""
    return (torch.arange(b["T"])[None, :] < torch.tensor(b["lengths"])[:, None]).long()


def rows(b: dict, width: int, g: torch.Generator) -> torch.Tensor:
    """(B, T, width) random vectors; padded rows hold large junk, as they may after a real layer.

    A position-wise module must give every row the same answer whatever its neighbours hold.
    """
    x = torch.randn(b["B"], b["T"], width, generator=g)
    junk = 20 * torch.randn(b["B"], b["T"], width, generator=g)
    return torch.where(padding(b)[..., None].bool(), x, junk)


def encoder_mask(b: dict) -> torch.Tensor | None:
    """The additive mask a BertModel hands its encoder, in the drawn form (or none)."""
    if b["mask"] == "none":
        return None
    return additive_mask(padding(b), per_query=b["mask"] == "per_query")


def fuzz_inputs(task: str, b: dict) -> dict:
    """Keyword arguments of the module of ``task`` for the drawn batch ``b``."""
    config = context().model.config
    g = torch.Generator().manual_seed(b["seed"])
    H, I = config.hidden_size, config.intermediate_size
    if task in ("2.1", "6.4"):
        real = padding(b).bool()
        ids = torch.randint(config.vocab_size, (b["B"], b["T"]), generator=g)
        ids = torch.where(real, ids, torch.full_like(ids, config.pad_token_id))  # [PAD] where padded
        types = torch.randint(config.type_vocab_size, ids.shape, generator=g) if b["token_types"] else None
        if task == "2.1":
            return {"input_ids": ids, "token_type_ids": types}
        mask = None if b["mask"] == "none" else padding(b)
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    if task in ("3.2", "4.2", "6.1", "6.2"):
        return {"hidden_states": rows(b, H, g), "attention_mask": encoder_mask(b)}
    if task == "4.1":
        return {"hidden_states": rows(b, H, g), "input_tensor": rows(b, H, g)}
    if task == "5.1":
        return {"hidden_states": rows(b, H, g)}
    if task == "5.2":
        return {"hidden_states": rows(b, I, g), "input_tensor": rows(b, H, g)}
    if task == "6.3":
        return {"hidden_states": rows(b, H, g)}
    raise KeyError(task)


def learner_module(task: str, layer: int | None) -> torch.nn.Module:
    """The solution's class of ``task``, built from the config, with HF's weights of ``layer``."""
    t, ctx = TASKS[task], context()
    assert isinstance(t, ModuleTask), f"task {task} is not a module's"
    module = solution()[t.title](ctx.config)
    module.load_state_dict(t.reference(ctx, layer).state_dict(), strict=True)
    return module.eval()


# -- right code agrees with HF's module on any batch --------------------------------------------


@pytest.mark.parametrize("task", MODULE_TASKS)
def test_right_code_agrees_with_hf_on_any_batch(task):
    t, ctx = TASKS[task], context()
    layers = t.layers(ctx)
    # Per layer: the weights differ, the code does not; build each once, outside hypothesis.
    modules = {layer: learner_module(task, layer) for layer in layers}

    @FUZZ
    @given(b=batches(), pick=st.integers(0, len(layers) - 1))
    def agrees(b, pick):
        layer = layers[pick]
        inputs = fuzz_inputs(task, b)
        hf = t.reference(ctx, layer)
        with torch.no_grad():
            # Through the task's own call: the learner's side goes through the grader's harness
            # (copies of the inputs, transformers' code refused), outputs named as the checks name them.
            expected = {k: v.float() for k, v in t.call(hf, inputs).items()}
            got = t.call(modules[layer], inputs)
        assert set(got) == set(expected)
        for name, want in expected.items():
            assert tuple(got[name].shape) == tuple(want.shape), name
            diff = (got[name].float() - want).abs().max().item() if want.numel() else 0.0
            assert allclose(want, got[name], t.atol), f"{name}: max abs diff {diff:.2e} > atol {t.atol:g}"

    agrees()


# -- the checks' random inputs are valid inputs -------------------------------------------------


def assert_valid(task: str, inputs: dict, config) -> None:
    """Fail unless ``inputs`` are what HF's module of ``task`` may be given in a real model."""
    tensors = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    assert tensors, inputs
    H, I = config.hidden_size, config.intermediate_size
    widths = {"4.1": (H, H), "5.2": (I, H)}.get(task, (H,))
    B = T = None
    for name, value in tensors.items():
        assert value.numel() > 0, name
        if value.is_floating_point():
            assert value.dtype == torch.float32, name
        if name in ("hidden_states", "input_tensor", "inputs_embeds"):
            assert value.dim() == 3 and bool(torch.isfinite(value).all()), name
            width = widths[0] if name == "hidden_states" else H
            assert value.shape[-1] == width, (name, value.shape, width)
            B, T = B or value.shape[0], T or value.shape[1]
            assert value.shape[:2] == (B, T), name
    for name, high in (
        ("input_ids", config.vocab_size),
        ("token_type_ids", config.type_vocab_size),
        ("position_ids", config.max_position_embeddings),
    ):
        if tensors.get(name) is not None:
            ids = tensors[name]
            assert not ids.is_floating_point() and ids.dim() == 2, name
            assert int(ids.min()) >= 0 and int(ids.max()) < high, (name, int(ids.min()), int(ids.max()), high)
            B, T = B or ids.shape[0], T or ids.shape[1]
            assert tuple(ids.shape) == (B, T), name
    assert B is not None and T is not None and B >= 1 and T >= 1
    past = inputs.get("past_key_values_length", 0)
    assert 0 <= past and past + T <= config.max_position_embeddings, (past, T)
    mask = tensors.get("attention_mask")
    if mask is None:
        return
    if task == "6.4":  # the tokenizer's (B, T) 0/1 mask: right-padded, every sequence non-empty
        assert tuple(mask.shape) == (B, T) and not mask.is_floating_point()
        assert set(mask.unique().tolist()) <= {0, 1}
        assert bool((mask[:, :-1] >= mask[:, 1:]).all()), "a 0 before a 1: not right padding"
        assert bool((mask[:, 0] == 1).all()), "a sequence with no real token"
        return
    # the additive mask HF hands a layer: 0 keeps a key, the most negative float removes it
    assert mask.dtype == torch.float32 and tuple(mask.shape) in ((B, 1, T, T), (B, 1, 1, T)), mask.shape
    minimum = torch.finfo(torch.float32).min
    assert bool(((mask == 0) | (mask == minimum)).all())
    assert bool((mask == 0).any(-1).all()), "a query with every key masked"


def generator_contexts() -> list[Context]:
    """The pretrained context and the other config's (the ``config`` check draws inputs from both)."""
    ctx = context()
    return [ctx, ctx.other()]


@pytest.mark.parametrize("task", MODULE_TASKS)
def test_the_checks_random_inputs_are_valid(task):
    t = TASKS[task]
    contexts = generator_contexts()

    @FUZZ
    @given(seed=st.integers(0, 2**31 - 1), which=st.integers(0, len(contexts) - 1))
    def valid(seed, which):
        base = contexts[which]
        ctx = Context(model=base.model, capture=base.capture, generator=torch.Generator().manual_seed(seed))
        inputs, description = t.random_inputs(ctx)
        assert isinstance(description, str) and description
        assert_valid(task, inputs, ctx.model.config)
        layer = t.layers(ctx)[0]
        with torch.no_grad():
            out = t.call(t.reference(ctx, layer), inputs)
        assert all(bool(torch.isfinite(v).all()) for v in out.values()), description

    valid()


@FUZZ
@given(seed=st.integers(0, 2**31 - 1))
def test_every_embeddings_batch_form_is_valid(seed):
    """Task 2.1's batches check also draws word vectors and default positions after a past."""
    from bertlab.checks import embeddings

    ctx = context()
    ctx = Context(model=ctx.model, capture=ctx.capture, generator=torch.Generator().manual_seed(seed))
    drawn = [embeddings.random_ids_batch(ctx, *form) for form in embeddings.FORMS]
    drawn += [embeddings.random_embeds_batch(ctx), embeddings.random_past_batch(ctx)]
    for inputs, _ in drawn:
        assert_valid("2.1", inputs, ctx.model.config)
