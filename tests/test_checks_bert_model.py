"""Task 6's checks: the solution notebook's classes pass; wrong layers, encoders, poolers and models
fail as they should; transformers' own classes are refused as the learner's code."""

from __future__ import annotations

import functools

import pytest
import torch
from transformers.modeling_outputs import BaseModelOutputWithPoolingAndCrossAttentions
from transformers.models.bert import modeling_bert as hf

from bertlab import capture, reference
from bertlab.checks import TASKS, CheckFailed, check
from bertlab.masks import additive_mask
from tests.conftest import solution_namespace

TITLES = {"6.1": "BertLayer", "6.2": "BertEncoder", "6.3": "BertPooler", "6.4": "BertModel"}


@functools.cache
def solution() -> dict:
    """Notebook 06's classes, its solutions and the given Tasks 2.1 to 5.2: learner-style right code."""
    return solution_namespace("06-bert-model")


def fresh(task: str) -> type:
    """A new subclass of the solution's class for ``task``: a class no check has seen before.

    So a test's verdict comes from stages run in its own call, even if the checks ever remember
    what passed for a class they were given earlier.
    """
    base = solution()[TITLES[task]]
    return type(base.__name__, (base,), {})


def test_the_solution_passes_every_check(capsys):
    for task in TITLES:
        check(task, fresh(task))
    out = capsys.readouterr().out
    for task, title in TITLES.items():
        n = len(TASKS[task].stages)
        assert f"[Task {task}] {title} passed ({n}/{n} checks)" in out, out
    # The bundled model is a sentence-transformers model: the sentence check ran (the class is
    # new, so no earlier run can answer for it) and did not take its skip path.
    assert "sentences" in TASKS["6.4"].stages
    assert "skipped" not in out, out


def test_the_sentence_check_runs_and_compares_on_the_bundled_model(capsys):
    """On the bundled model the sentence check compares: the solution passes it, a shifted model fails it."""
    check("6.4", fresh("6.4"), only="sentences")
    assert "skipped" not in capsys.readouterr().out
    # A model that differs from the pretrained one only in its last hidden state fails this check
    # alone: it compares, it does not just pass.
    with pytest.raises(CheckFailed, match=r"SentenceTransformer"):
        check("6.4", shifted_model(), only="sentences")


@pytest.mark.parametrize(
    "task, cls", [("6.1", "BertLayer"), ("6.2", "BertEncoder"), ("6.3", "BertPooler"), ("6.4", "BertModel")]
)
def test_transformers_own_classes_are_refused(task, cls):
    with pytest.raises(CheckFailed) as err:
        check(task, getattr(hf, cls))
    assert str(err.value).startswith(f"[Task {task}] {cls}: ")
    assert "transformers" in str(err.value)
    assert err.value.mistake is None


def test_the_complete_state_dict_has_no_buffers():
    """HF's embeddings buffers are non-persistent: a learner's BertModel loads it strictly."""
    keys = reference.load_model().state_dict()
    assert not [k for k in keys if k.endswith(("position_ids", "token_type_ids"))]


def test_nothing_hard_wired_to_the_pretrained_sizes(tiny_bert_dir, monkeypatch, capsys):
    classes = {task: fresh(task) for task in TITLES}  # before the switch: the notebook loads the bundled model
    monkeypatch.setenv(reference.ENV_VAR, str(tiny_bert_dir))
    for task, cls in classes.items():
        check(task, cls)
    assert capture.capture().hidden_states[0].shape[-1] == 32
    out = capsys.readouterr().out
    n = len(TASKS["6.4"].stages)
    assert f"[Task 6.4] BertModel passed ({n}/{n} checks)" in out
    assert "skipped" in out  # a tiny random BERT is no sentence-transformers model


# -- learner-style modules, subclasses of the solution's, one flaw each ------------------------


def layer_skips_ffn():
    class SkipsFFN(solution()["BertLayer"]):
        def forward(self, hidden_states, attention_mask=None, **kwargs):
            return self.attention(hidden_states, attention_mask)[0]

    return SkipsFFN


def layer_without_mask():
    class LayerWithoutMask(solution()["BertLayer"]):
        def forward(self, hidden_states, attention_mask=None, **kwargs):
            return super().forward(hidden_states, None)

    return LayerWithoutMask


def encoder_without_input_state():
    class NoInputState(solution()["BertEncoder"]):
        def forward(self, hidden_states, attention_mask=None, **kwargs):
            last, states = super().forward(hidden_states, attention_mask)
            return last, states[1:]

    return NoInputState


def pooler(token=lambda h: h[:, 0], tanh=True):
    """The solution's pooler, pooling ``token(hidden_states)`` (B, H), with or without the tanh."""

    class Pooler(solution()["BertPooler"]):
        def forward(self, hidden_states):
            pooled = self.dense(token(hidden_states))  # (B, H)
            return torch.tanh(pooled) if tanh else pooled

    return Pooler


def model(mask=lambda m: additive_mask(m, per_query=False), keep=slice(None), shift=0.0):
    """A learner's BertModel written out: ``mask`` builds the encoder's mask from the (B, T) one,
    ``keep`` selects the hidden states returned, ``shift`` moves the last hidden state."""

    class Model(solution()["BertModel"]):
        def forward(
            self,
            input_ids=None,
            attention_mask=None,
            token_type_ids=None,
            position_ids=None,
            inputs_embeds=None,
            **kwargs,
        ):
            embedding_output = self.embeddings(
                input_ids=input_ids,
                token_type_ids=token_type_ids,
                position_ids=position_ids,
                inputs_embeds=inputs_embeds,
            )  # (B, T, H)
            encoder_mask = None if attention_mask is None else mask(attention_mask)
            last, states = self.encoder(embedding_output, encoder_mask)
            return last + shift, self.pooler(last), states[keep]

    return Model


def shifted_model():
    # The last hidden state is off, the hidden states are not: only the sentence check sees it.
    return model(shift=0.1)


WRONG = {
    "SkipsFFN": layer_skips_ffn,
    "LayerWithoutMask": layer_without_mask,
    "NoInputState": encoder_without_input_state,
    "NoTanh": lambda: pooler(tanh=False),
    "LastToken": lambda: pooler(token=lambda h: h[:, -1]),
    "MeanToken": lambda: pooler(token=lambda h: h.mean(dim=1)),
    # Eager attention adds a bool mask as +1 / +0: no error, wrong numbers.
    "BoolMask": lambda: model(mask=lambda m: m[:, None, None, :].bool()),
    "MaskNotPassed": lambda: model(mask=lambda m: None),
    "ModelWithoutInputState": lambda: model(keep=slice(1, None)),
}


def test_a_model_written_out_passes():
    check("6.4", model())


@pytest.mark.parametrize(
    "task, wrong, mistake",
    [
        ("6.1", "SkipsFFN", "layer-skips-ffn"),
        ("6.1", "LayerWithoutMask", "encoder-mask-not-applied"),
        ("6.2", "NoInputState", "hidden-states-missing-embeddings"),
        ("6.3", "NoTanh", "pooler-no-tanh"),
        ("6.3", "LastToken", "pooler-wrong-token"),
        ("6.3", "MeanToken", "pooler-wrong-token"),
        ("6.4", "BoolMask", "bool-mask-added"),
        ("6.4", "MaskNotPassed", "encoder-mask-not-applied"),
        ("6.4", "ModelWithoutInputState", "hidden-states-missing-embeddings"),
    ],
)
def test_known_mistakes_are_named(task, wrong, mistake):
    with pytest.raises(CheckFailed) as err:
        check(task, WRONG[wrong]())
    assert err.value.mistake == mistake, str(err.value)
    assert f"(known mistake `{mistake}`)" in str(err.value)
    assert 'See lessons/07-putting-it-together (section "' in str(err.value)


def test_the_pooler_is_right_only_on_the_first_token():
    check("6.3", pooler())


# -- other failures read well -------------------------------------------------------------------


def stub():
    class Stub(solution()["BertModel"]):
        def __init__(self, config):
            raise NotImplementedError()

    return Stub


def encoder_returns_tensor():
    class EncoderReturnsTensor(solution()["BertEncoder"]):
        def forward(self, hidden_states, attention_mask=None, **kwargs):
            return super().forward(hidden_states, attention_mask)[0]

    return EncoderReturnsTensor


def model_returns_output_object():
    # transformers' output dataclass, not its model code: a learner copying HF's return value
    class ModelReturnsOutputObject(solution()["BertModel"]):
        def forward(self, *args, **kwargs):
            last, pooled, states = super().forward(*args, **kwargs)
            return BaseModelOutputWithPoolingAndCrossAttentions(
                last_hidden_state=last, pooler_output=pooled, hidden_states=states
            )

    return ModelReturnsOutputObject


def model_persistent_buffer():
    class ModelPersistentBuffer(solution()["BertModel"]):
        def __init__(self, config):
            super().__init__(config)
            self.embeddings.register_buffer("position_ids", torch.arange(config.max_position_embeddings)[None, :])

    return ModelPersistentBuffer


@pytest.mark.parametrize(
    "task, make, expected, only",
    [
        ("6.4", stub, r"\[Task 6.4\] BertModel: not implemented yet: Stub\(config\) raises NotImplementedError", None),
        (
            "6.2",
            encoder_returns_tensor,
            r"forward must return a tuple \(last_hidden_state, hidden_states\); "
            r"got a tensor of shape \[10, \d+, 384\]",
            None,
        ),
        (
            "6.4",
            model_returns_output_object,
            r"forward must return a tuple \(last_hidden_state, pooler_output, "
            r"hidden_states\); got BaseModelOutputWithPoolingAndCrossAttentions",
            None,
        ),
        (
            "6.4",
            model_persistent_buffer,
            r"embeddings.position_ids is saved in the state_dict.*\n.*persistent=False",
            None,
        ),
        (
            "6.4",
            shifted_model,
            r"values differ from SentenceTransformer\(all-MiniLM-L6-v2\)\.encode\(corpus.SENTENCES\)"
            r" after mean pooling and L2 normalisation \(atol 6e-05, rtol 1.1e-05\)\n"
            r"  max abs diff .* at \(sentence \d+, dim \d+\)",
            "sentences",
        ),
    ],
)
def test_failures_say_what_and_where(task, make, expected, only):
    with pytest.raises(CheckFailed, match=expected) as err:
        check(task, make(), only=only)
    assert err.value.mistake is None


def test_a_shifted_last_hidden_state_fails_the_values_check():
    with pytest.raises(CheckFailed, match=r"`last_hidden_state` values differ from the pretrained model"):
        check("6.4", shifted_model(), upto="values")


def test_the_given_classes_are_the_earlier_solutions():
    """Notebook 06 gives Tasks 2.1 to 5.2 as working code: the same code as their reference solutions."""
    import nbformat

    from tests.conftest import solution_notebook

    def solution_code(name):
        nb = nbformat.read(solution_notebook(name), as_version=4)
        return [
            "\n".join(
                line
                for line in cell.source.splitlines()
                if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")
            )
            for cell in nb.cells
            if cell.metadata.get("nbgrader", {}).get("solution")
        ]

    nb = nbformat.read(solution_notebook("06-bert-model"), as_version=4)
    given = next(c.source for c in nb.cells if c.cell_type == "code" and "class BertOutput(" in c.source)
    earlier = [
        code
        for name in ("02-embeddings", "03-self-attention", "04-attention-output", "05-feed-forward")
        for code in solution_code(name)
    ]
    assert given == "\n\n\n".join(earlier), "notebook 06's given cell differs from the solutions of 02 to 05"


# -- an encoder whose entries are one layer object ---------------------------------------------


def one_layer_repeated(config):
    layer = solution()["BertLayer"](config)
    return torch.nn.ModuleList([layer] * config.num_hidden_layers)


def one_layer_appended(config):
    layers, layer = torch.nn.ModuleList(), solution()["BertLayer"](config)
    for _ in range(config.num_hidden_layers):
        layers.append(layer)  # the same object each time
    return layers


@pytest.mark.parametrize("make_layers", [one_layer_repeated, one_layer_appended])
def test_entries_that_are_one_layer_are_told_so(make_layers):
    class SharedLayers(torch.nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            self.layer = make_layers(config)

        def forward(self, hidden_states, attention_mask=None, **kwargs):
            states = (hidden_states,)
            for block in self.layer:
                hidden_states = block(hidden_states, attention_mask)
                states += (hidden_states,)
            return hidden_states, states

    with pytest.raises(CheckFailed) as err:
        check("6.2", SharedLayers, upto="shapes")
    message = str(err.value)
    assert "the 6 entries of `self.layer` are 1 module object" in message, message
    assert "holds 1 layers" not in message
    assert "share one set of weights" in message
