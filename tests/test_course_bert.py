"""bertlab.bert, the course's own BERT, against transformers' BERT: the same numbers, bit for bit.

Every class runs beside transformers' class of the same name under the same weights and inputs: in
eval mode, in train mode under the same seed (dropout draws in the same order), and backwards under
the same upstream gradient. Twice: with the pretrained model's config and weights, and with a small
config that differs in every size, dropout, LayerNorm eps and feed-forward chunking. Every expected
value here is one transformers computed; none is a constant written in this file.
"""

from __future__ import annotations

import copy
import functools
import json
import pickle
import subprocess
import sys
import textwrap
from collections.abc import Mapping

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, BertForMaskedLM, BertForSequenceClassification
from transformers import BertConfig as HFBertConfig
from transformers import BertModel as HFBertModel
from transformers.activations import ACT2FN as HF_ACT2FN
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_outputs import BaseModelOutputWithPoolingAndCrossAttentions as HFPoolingOutput
from transformers.models.bert import modeling_bert as hf_bert

from bertlab import bert, corpus, reference

B, T = 3, 6  # T a multiple of the small config's chunk_size_feed_forward
LENGTHS = (6, 4, 2)  # tokens per row; the rest is padding
SMALL = {
    "vocab_size": 99,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 48,
    "hidden_dropout_prob": 0.2,
    "attention_probs_dropout_prob": 0.3,
    "layer_norm_eps": 1e-5,
    "chunk_size_feed_forward": 3,
    "max_position_embeddings": 16,
    "type_vocab_size": 3,
}
# Where each class sits in the pretrained model, to take its weights from.
PRETRAINED_PART = {
    "BertEmbeddings": lambda m: m.embeddings,
    "BertSelfAttention": lambda m: m.encoder.layer[0].attention.self,
    "BertSelfOutput": lambda m: m.encoder.layer[0].attention.output,
    "BertAttention": lambda m: m.encoder.layer[0].attention,
    "BertIntermediate": lambda m: m.encoder.layer[0].intermediate,
    "BertOutput": lambda m: m.encoder.layer[0].output,
    "BertLayer": lambda m: m.encoder.layer[1],
    "BertEncoder": lambda m: m.encoder,
    "BertPooler": lambda m: m.pooler,
    "BertModel": lambda m: m,
}


@functools.cache
def configs(kind: str):
    """(transformers' config, the course's config) describing the same BERT."""
    if kind == "pretrained":
        return reference.load_config(), bert.load_config()
    return HFBertConfig(**SMALL, attn_implementation="eager"), bert.BertConfig(**SMALL)


def module_pair(kind: str, name: str):
    """transformers' ``name`` and the course's, holding the same weights, gradients cleared."""
    hf, mine = _module_pair(kind, name)
    for parameter in (*hf.parameters(), *mine.parameters()):
        parameter.grad = None
    return hf, mine


@functools.cache
def _module_pair(kind: str, name: str):
    """Built once per test process; the tests change no weight (strict load: the same names)."""
    hf_config, config = configs(kind)
    if (kind, name) == ("pretrained", "BertModel"):  # copies: building and initialising both takes longer
        hf = copy.deepcopy(reference.load_model()).requires_grad_()
        mine = copy.deepcopy(bert.load_model()).requires_grad_()
        mine.load_state_dict(hf.state_dict(), strict=True)
        return hf, mine
    torch.manual_seed(0)
    hf = getattr(hf_bert, name)(hf_config)
    if kind == "pretrained":
        hf.load_state_dict(PRETRAINED_PART[name](reference.load_model()).state_dict(), strict=True)
    else:
        with torch.no_grad():  # LayerNorm at identity and zero biases would hide mistakes: perturb all
            for parameter in hf.parameters():
                parameter.add_(0.1 * torch.randn_like(parameter))
    mine = getattr(bert, name)(config)
    mine.load_state_dict(hf.state_dict(), strict=True)
    return hf, mine


def inputs(kind: str, name: str, variant: str) -> tuple[tuple, dict]:
    """(args, kwargs) for one call; float tensors are the differentiable inputs."""
    hf_config, _ = configs(kind)
    g = torch.Generator().manual_seed(1)
    H, I = hf_config.hidden_size, hf_config.intermediate_size
    hidden = torch.randn(B, T, H, generator=g)
    padding = (torch.arange(T)[None, :] < torch.tensor(LENGTHS)[:, None]).long()  # (B, T) 1 = token
    additive = create_bidirectional_mask(config=hf_config, inputs_embeds=hidden, attention_mask=padding)
    ids = torch.randint(1, hf_config.vocab_size, (B, T), generator=g)
    types = torch.randint(0, hf_config.type_vocab_size, (B, T), generator=g)
    table = {
        ("BertEmbeddings", "ids"): ((ids, types), {}),
        ("BertEmbeddings", "embeds"): ((), {"inputs_embeds": hidden}),  # default token types: the buffer
        ("BertSelfAttention", "mask"): ((hidden, additive), {"output_attentions": False}),  # an extra keyword
        ("BertAttention", "mask"): ((hidden, additive), {}),
        ("BertSelfOutput", "mask"): ((hidden, torch.randn(B, T, H, generator=g)), {}),
        ("BertIntermediate", "mask"): ((hidden,), {}),
        ("BertOutput", "mask"): ((torch.randn(B, T, I, generator=g), hidden), {}),
        ("BertLayer", "mask"): ((hidden, additive), {}),
        ("BertEncoder", "mask"): ((hidden, additive), {}),
        ("BertPooler", "mask"): ((hidden,), {}),
        ("BertModel", "ids"): ((), {"input_ids": ids, "attention_mask": padding, "token_type_ids": types}),
        ("BertModel", "embeds"): ((), {"inputs_embeds": hidden, "attention_mask": padding, "position_ids": ids % T}),
        ("BertModel", "flags"): ((ids,), {"output_hidden_states": True, "output_attentions": True}),
    }
    return table[(name, variant)]


CASES = [
    ("BertEmbeddings", "ids"),
    ("BertEmbeddings", "embeds"),
    ("BertSelfAttention", "mask"),
    ("BertAttention", "mask"),
    ("BertSelfOutput", "mask"),
    ("BertIntermediate", "mask"),
    ("BertOutput", "mask"),
    ("BertLayer", "mask"),
    ("BertEncoder", "mask"),
    ("BertPooler", "mask"),
    ("BertModel", "ids"),
    ("BertModel", "embeds"),
    ("BertModel", "flags"),
]
KINDS = ["pretrained", "small"]


def flat(output) -> list:
    """The tensors of an output (a tensor, a tuple, a ModelOutput), nested tuples flattened, in order."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, Mapping):
        return flat(tuple(output.values()))
    if isinstance(output, (tuple, list)):
        return [t for item in output for t in flat(item)]
    return [output]


def assert_same_output(hf_out, out) -> None:
    assert type(out).__name__ == type(hf_out).__name__
    if isinstance(hf_out, Mapping):
        assert list(out.keys()) == list(hf_out.keys())
    expected, got = flat(hf_out), flat(out)
    assert len(got) == len(expected)
    for e, g in zip(expected, got, strict=True):
        if isinstance(e, torch.Tensor):
            assert torch.equal(g, e), f"max |diff| {(g - e).abs().max().item():.3g}"
        else:
            assert g == e


def run(module, args, kwargs, seed: int | None = None):
    if seed is not None:
        torch.manual_seed(seed)
    return module(*args, **kwargs)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("name", "variant"), CASES)
def test_eval_outputs_equal(kind, name, variant):
    hf, mine = module_pair(kind, name)
    hf.eval(), mine.eval()
    args, kwargs = inputs(kind, name, variant)
    with torch.no_grad():
        assert_same_output(run(hf, args, kwargs), run(mine, args, kwargs))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("name", "variant"), CASES)
def test_train_outputs_and_gradients_equal(kind, name, variant):
    """Same seed, same dropout masks; the same upstream gradient gives the same gradients everywhere."""
    hf, mine = module_pair(kind, name)
    hf.train(), mine.train()
    args, kwargs = inputs(kind, name, variant)
    runs = []
    for module in (hf, mine):
        # Each model differentiates its own copy of the float inputs.
        a = tuple(x.clone().requires_grad_() if x is not None and x.is_floating_point() else x for x in args)
        k = {
            key: x.clone().requires_grad_() if x.is_floating_point() else x
            for key, x in kwargs.items()
            if isinstance(x, torch.Tensor)
        } | {key: x for key, x in kwargs.items() if not isinstance(x, torch.Tensor)}
        out = run(module, a, k, seed=7)
        upstream = torch.Generator().manual_seed(3)
        loss = sum((t * torch.randn(t.shape, generator=upstream)).sum() for t in flat(out) if t.is_floating_point())
        loss.backward()
        runs.append((out, [x for x in (*a, *k.values()) if isinstance(x, torch.Tensor) and x.requires_grad]))
    (hf_out, hf_inputs), (out, my_inputs) = runs
    assert_same_output(hf_out, out)
    hf_grads = {n: p.grad for n, p in hf.named_parameters()}
    my_grads = {n: p.grad for n, p in mine.named_parameters()}
    assert my_grads.keys() == hf_grads.keys()
    assert any(g is not None for g in hf_grads.values())
    for n, g in hf_grads.items():
        assert (my_grads[n] is None) == (g is None), n
        assert g is None or torch.equal(my_grads[n], g), f"{n}: max |diff| {(my_grads[n] - g).abs().max().item():.3g}"
    for hf_x, my_x in zip(hf_inputs, my_inputs, strict=True):
        assert torch.equal(my_x.grad, hf_x.grad)


@pytest.mark.parametrize("name", list(PRETRAINED_PART))
def test_construction_draws_the_same_weights(name):
    """Built under the same seed, each class holds the same tensors under the same names as transformers'
    (the submodules are made in the same order; BertModel re-draws them as transformers' init does)."""
    hf_config, config = configs("small")
    torch.manual_seed(5)
    hf = getattr(hf_bert, name)(hf_config)
    torch.manual_seed(5)
    mine = getattr(bert, name)(config)
    hf_state, state = hf.state_dict(), mine.state_dict()
    assert list(state) == list(hf_state)
    for key, tensor in hf_state.items():
        assert torch.equal(state[key], tensor), key
    assert [n for n, _ in mine.named_buffers()] == [n for n, _ in hf.named_buffers()]
    for (_, b), (_, hf_b) in zip(mine.named_buffers(), hf.named_buffers(), strict=True):
        assert torch.equal(b, hf_b) and b.dtype == hf_b.dtype
    assert [(n, type(m).__name__) for n, m in mine.named_modules()] == [
        (n, type(m).__name__) for n, m in hf.named_modules()
    ]


def test_attributes_as_transformers_names_them():
    hf, mine = module_pair("pretrained", "BertModel")
    for path in ("encoder.layer.0.attention.self", "encoder.layer.0", "embeddings", "encoder.layer.0.intermediate"):
        hf_module, my_module = hf.get_submodule(path), mine.get_submodule(path)
        plain = {k: v for k, v in vars(hf_module).items() if not k.startswith("_") and k != "training"}
        for key, value in plain.items():
            if isinstance(value, (int, float, str, bool)) or value is None:
                assert getattr(my_module, key) == value, f"{path}.{key}"
    assert mine.pooler is not None and bert.BertModel(configs("small")[1], add_pooling_layer=False).pooler is None


# -- the whole pretrained model --------------------------------------------------------------------


def test_pretrained_model_equals_transformers(model, batch):
    mine = bert.load_model()
    assert not mine.training and not any(p.requires_grad for p in mine.parameters())
    assert mine.dtype == torch.float32 and bert.load_model() is mine  # cached per process
    assert bert.load_config() is mine.config
    hf_state, state = model.state_dict(), mine.state_dict()
    assert list(state) == list(hf_state)
    assert all(torch.equal(state[k], t) for k, t in hf_state.items())
    assert [(n, b.dtype, tuple(b.shape)) for n, b in mine.named_buffers()] == [
        (n, b.dtype, tuple(b.shape)) for n, b in model.named_buffers()
    ]
    buffers = zip(mine.named_buffers(), model.named_buffers(), strict=True)
    assert all(torch.equal(b, hf_b) for (_, b), (_, hf_b) in buffers)

    with torch.no_grad():
        for kwargs in (
            {},
            {"output_hidden_states": True, "output_attentions": True},
            {"output_attentions": True},
            {"output_hidden_states": [0, -1]},  # selected hidden states; the others are None
            {"output_hidden_states": True, "return_dict": False},
        ):
            hf_out, out = model(**batch, **kwargs), mine(**batch, **kwargs)
            assert_same_output(hf_out, out)
            if kwargs.get("output_hidden_states") is True:
                assert len(out[2]) == model.config.num_hidden_layers + 1


def test_config_equals_transformers():
    for hf_config, config in (configs("pretrained"), (HFBertConfig(), bert.BertConfig())):
        expected = {**hf_config.to_dict(), "transformers_version": config.transformers_version}
        assert config.to_dict() == expected
        assert bert.BertConfig.from_dict(hf_config.to_dict()).to_dict() == hf_config.to_dict()  # a config crossing
        for attr in (
            "hidden_act",
            "chunk_size_feed_forward",
            "is_decoder",
            "add_cross_attention",
            "layer_norm_eps",
            "output_attentions",
            "output_hidden_states",
            "return_dict",
            "use_return_dict",
            "num_labels",
            "id2label",
            "use_cache",
            "dtype",
            "torch_dtype",
            "is_encoder_decoder",
            "name_or_path",
        ):
            assert getattr(config, attr) == getattr(hf_config, attr), attr
    assert configs("pretrained")[1]._attn_implementation == configs("pretrained")[0]._attn_implementation == "eager"
    path = reference.model_dir() / "config.json"
    assert bert.BertConfig.from_json_file(path).hidden_size == HFBertConfig.from_json_file(path).hidden_size
    labelled, hf_labelled = bert.BertConfig(num_labels=5), HFBertConfig(num_labels=5)
    assert (labelled.id2label, labelled.label2id) == (hf_labelled.id2label, hf_labelled.label2id)
    config = configs("pretrained")[1]
    assert pickle.loads(pickle.dumps(config)) == config and copy.deepcopy(config) == config
    assert config != bert.BertConfig.from_dict({**config.to_dict(), "hidden_size": 7})
    assert "hidden_size" in repr(config)


def test_activations_equal_transformers():
    x = torch.cat([torch.randn(1000, generator=torch.Generator().manual_seed(0)) * 4, torch.tensor([0.0, -30, 30])])
    for name in bert.ACT2FN:
        hf_act, act = HF_ACT2FN[name], bert.ACT2FN[name]
        assert type(act).__name__ == type(hf_act).__name__, name
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        hf_y, y = hf_act(a), act(b)
        assert torch.equal(y, hf_y), name
        hf_y.sum().backward(), y.sum().backward()
        assert torch.equal(b.grad, a.grad), name
    assert {"gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "swish", "tanh"} <= set(bert.ACT2FN)
    assert bert.ACT2FN["gelu"] is not bert.ACT2FN["gelu"]  # a new module each time, as transformers'


def test_attention_mask_as_transformers_builds_it():
    hf_config, _ = configs("small")
    embeds = torch.randn(B, T, 32)
    padded = (torch.arange(T)[None, :] < torch.tensor(LENGTHS)[:, None]).long()
    for mask in (padded, padded.float(), torch.ones(B, T, dtype=torch.long), None):
        hf_mask = create_bidirectional_mask(config=hf_config, inputs_embeds=embeds, attention_mask=mask)
        mine = bert.bidirectional_mask(mask, embeds)
        assert (mine is None) == (hf_mask is None)  # no padding: no mask at all, in both
        assert mine is None or (torch.equal(mine, hf_mask) and mine.dtype == hf_mask.dtype)
    prepared = torch.zeros(B, 1, T, T)
    assert bert.bidirectional_mask(prepared, embeds) is prepared  # a 4-D mask is used as given


def test_output_classes_index_like_transformers():
    a, b, c = torch.ones(1), torch.zeros(2), (torch.ones(3),)
    for fields in (
        {"last_hidden_state": a},
        {"last_hidden_state": a, "pooler_output": b},
        {"last_hidden_state": a, "attentions": c},
        {"last_hidden_state": a, "pooler_output": b, "hidden_states": c},
    ):
        hf_out, out = HFPoolingOutput(**fields), bert.BaseModelOutputWithPoolingAndCrossAttentions(**fields)
        assert list(out.keys()) == list(hf_out.keys()) and list(out) == list(hf_out) and len(out) == len(hf_out)
        assert [id(x) for x in out.to_tuple()] == [id(x) for x in hf_out.to_tuple()]
        for i in range(-len(hf_out), len(hf_out)):
            assert out[i] is hf_out[i]
        assert [id(x) for x in out[1:]] == [id(x) for x in hf_out[1:]]
        for key in hf_out:
            assert out[key] is hf_out[key] and getattr(out, key) is getattr(hf_out, key)
        assert out.cross_attentions is hf_out.cross_attentions is None
        with pytest.raises(KeyError):
            out["cross_attentions"]
        hf_out.cross_attentions, out.cross_attentions = c, c  # set later: appended, as there
        assert list(out.keys()) == list(hf_out.keys()) and out[-1] is hf_out[-1]
        restored = pickle.loads(pickle.dumps(out))
        assert list(restored.keys()) == list(out.keys()) and torch.equal(restored.last_hidden_state, a)


# -- the tokenizer ---------------------------------------------------------------------------------

ODD_TEXTS = [
    "",
    "Héllo Wörld, café naïve résumé — ÀÉÎÕÜ",
    "日本語のテキストと中文",
    "[MASK] is special, [SEP] too; [cls] is not",
    "   spaces\tand\ttabs\nand new lines   ",
    "unaffable supercalifragilisticexpialidocious " + "x" * 150,
    "emoji 🤖 and symbols ©®™ ½ ∑",
    " ".join(corpus.SENTENCES) * 12,  # longer than 512 tokens: kept whole, as transformers keeps it
]


@functools.cache
def tokenizers():
    return AutoTokenizer.from_pretrained(reference.model_dir()), bert.load_tokenizer()


def assert_same_encoding(hf_enc, enc) -> None:
    assert list(enc.keys()) == list(hf_enc.keys())
    for key in hf_enc:
        if isinstance(hf_enc[key], torch.Tensor):
            assert torch.equal(enc[key], hf_enc[key]) and enc[key].dtype == hf_enc[key].dtype, key
        elif isinstance(hf_enc[key], np.ndarray):
            assert np.array_equal(enc[key], hf_enc[key]) and enc[key].dtype == hf_enc[key].dtype, key
        else:
            assert enc[key] == hf_enc[key], key


@pytest.mark.parametrize(
    "call",
    [
        {"padding": True, "return_tensors": "pt"},
        {"padding": True},
        {},
        {"truncation": True},
        {"padding": "max_length", "truncation": True, "max_length": 16, "return_tensors": "pt"},
        {"max_length": 10},
        {"padding": True, "return_tensors": "pt", "add_special_tokens": False},
        {"padding": True, "pad_to_multiple_of": 8, "return_special_tokens_mask": True, "return_offsets_mapping": True},
        {"padding": True, "padding_side": "left", "return_length": True, "return_tensors": "np"},
    ],
)
def test_tokenizer_batches_equal_transformers(call):
    hf_tok, tok = tokenizers()
    for texts in (list(corpus.SENTENCES), ODD_TEXTS, ODD_TEXTS[:1]):
        hf_enc, enc = hf_tok(texts, **call), tok(texts, **call)
        assert_same_encoding(hf_enc, enc)
        if "return_tensors" in call:
            assert all(type(enc[k]) is type(hf_enc[k]) for k in hf_enc)


def test_tokenizer_single_texts_pairs_and_helpers_equal_transformers():
    hf_tok, tok = tokenizers()
    for text in (*ODD_TEXTS, *corpus.SENTENCES[:3]):
        for kwargs in ({}, {"return_tensors": "pt"}, {"text_pair": "and a second segment"}):
            assert_same_encoding(hf_tok(text, **kwargs), tok(text, **kwargs))
        assert tok.tokenize(text) == hf_tok.tokenize(text)
        ids = hf_tok(text)["input_ids"]
        assert tok.encode(text) == hf_tok.encode(text)
        assert tok.convert_ids_to_tokens(ids) == hf_tok.convert_ids_to_tokens(ids)
        assert tok.convert_ids_to_tokens(torch.tensor(ids)) == hf_tok.convert_ids_to_tokens(torch.tensor(ids))
        assert tok.convert_ids_to_tokens(ids, skip_special_tokens=True) == hf_tok.convert_ids_to_tokens(
            ids, skip_special_tokens=True
        )
        for skip in (False, True):
            assert tok.decode(ids, skip_special_tokens=skip) == hf_tok.decode(ids, skip_special_tokens=skip)
            assert tok.decode(torch.tensor(ids), skip_special_tokens=skip) == hf_tok.decode(
                torch.tensor(ids), skip_special_tokens=skip
            )
        assert tok.decode(ids, clean_up_tokenization_spaces=True) == hf_tok.decode(
            ids, clean_up_tokenization_spaces=True
        )
    pair = (["a first", "b"], ["x y z", "the second text"])
    assert_same_encoding(
        hf_tok(*pair, padding=True, return_tensors="pt"), tok(*pair, padding=True, return_tensors="pt")
    )
    assert tok.batch_decode([[101, 7592, 102], [101, 102]]) == hf_tok.batch_decode([[101, 7592, 102], [101, 102]])
    assert tok.convert_ids_to_tokens(101) == hf_tok.convert_ids_to_tokens(101)
    assert tok.convert_tokens_to_ids(["hello", "[MASK]", "qqqzzz"]) == hf_tok.convert_tokens_to_ids(
        ["hello", "[MASK]", "qqqzzz"]
    )
    for attr in (
        "all_special_ids",
        "all_special_tokens",
        "special_tokens_map",
        "vocab_size",
        "model_max_length",
        "padding_side",
        "model_input_names",
    ):
        assert getattr(tok, attr) == getattr(hf_tok, attr), attr
    for name in ("pad", "unk", "cls", "sep", "mask", "bos", "eos"):
        assert getattr(tok, f"{name}_token") == getattr(hf_tok, f"{name}_token"), name
        assert getattr(tok, f"{name}_token_id") == getattr(hf_tok, f"{name}_token_id"), name
    assert len(tok) == len(hf_tok) and tok.get_vocab() == hf_tok.get_vocab()
    enc = tok(["a b", "c"], padding=True, return_tensors="pt")
    assert torch.equal(enc.input_ids, enc["input_ids"]) and enc.tokens(1) == hf_tok(["a b", "c"], padding=True).tokens(
        1
    )


def test_tokenizer_pipeline_is_transformers_pipeline():
    """The library tokenizer underneath is set up as transformers sets it up (the per-call truncation and
    padding state aside): the same normaliser, pre-tokeniser, vocabulary, added tokens, template, decoder."""
    hf_tok, tok = tokenizers()
    hf_json, my_json = json.loads(hf_tok.backend_tokenizer.to_str()), json.loads(tok.backend_tokenizer.to_str())
    for state in ("truncation", "padding"):
        hf_json.pop(state), my_json.pop(state)
    assert my_json == hf_json


# -- loading ---------------------------------------------------------------------------------------


def test_checkpoint_of_a_task_model_loads_its_bert(tmp_path):
    """A BertForSequenceClassification checkpoint keeps the BertModel under `bert.`, beside its head:
    the course's loader reads the BertModel part as transformers' BertModel.from_pretrained does."""
    hf_config, _ = configs("small")
    torch.manual_seed(2)
    BertForSequenceClassification(hf_config).save_pretrained(tmp_path / "classifier")
    hf = HFBertModel.from_pretrained(tmp_path / "classifier", attn_implementation="eager")
    mine = bert.load_model(tmp_path / "classifier")
    assert list(mine.state_dict()) == list(hf.state_dict())
    assert all(torch.equal(mine.state_dict()[k], t) for k, t in hf.state_dict().items())
    # The older weights file, pytorch_model.bin, read as transformers reads it.
    (tmp_path / "bin").mkdir()
    hf_config.save_pretrained(tmp_path / "bin")
    torch.save(hf.state_dict(), tmp_path / "bin" / "pytorch_model.bin")
    hf_bin = HFBertModel.from_pretrained(tmp_path / "bin", attn_implementation="eager")
    assert all(
        torch.equal(bert.load_model(tmp_path / "bin").state_dict()[k], t) for k, t in hf_bin.state_dict().items()
    )
    # A masked LM has no pooler: transformers would draw one at random; the course refuses, naming it.
    BertForMaskedLM(hf_config).save_pretrained(tmp_path / "masked-lm")
    with pytest.raises(reference.ReferenceError, match=r"missing \['pooler.dense.bias', 'pooler.dense.weight'\]"):
        bert.load_model(tmp_path / "masked-lm")


def test_decoder_settings_are_refused():
    config = bert.BertConfig(**SMALL)
    for setting in ({"is_decoder": True}, {"is_decoder": True, "add_cross_attention": True}):
        with pytest.raises(NotImplementedError, match=next(iter(setting))):
            bert.BertModel(bert.BertConfig(**{**SMALL, **setting}))
    with pytest.raises(NotImplementedError, match="sdpa"):
        bert.BertConfig(**SMALL, attn_implementation="sdpa")
    with pytest.raises(NotImplementedError, match="past_key_values"):
        bert.BertModel(config)(torch.ones(1, 2, dtype=torch.long), past_key_values=object())


def test_runs_where_transformers_cannot_be_imported(tmp_path, model, batch):
    """The learner's process cannot read transformers' model code: the package must not need it."""
    script = textwrap.dedent(f"""
        import sys
        sys.modules["transformers"] = None  # any import of it now fails
        sys.modules["sentence_transformers"] = None
        import torch
        import bertlab.bert
        from bertlab import corpus
        model, tokenizer = bertlab.bert.load_model(), bertlab.bert.load_tokenizer()
        print("COMPILER", "torch._dynamo" in sys.modules)  # what building on the meta device imported
        with torch.no_grad():
            out = model(**corpus.batch(tokenizer), output_hidden_states=True, output_attentions=True)
        torch.save({{"last": out.last_hidden_state, "pooled": out.pooler_output, "attentions": out.attentions}},
                   {str(tmp_path / "out.pt")!r})
        leaked = [name for name in sys.modules if name.split(".")[0] in ("transformers", "sentence_transformers")
                  and sys.modules[name] is not None]
        print("LEAKED", leaked)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "LEAKED []" in result.stdout
    # Loading draws nothing (bertlab.bert.load): a second of every learner process's start.
    assert "COMPILER False" in result.stdout
    got = torch.load(tmp_path / "out.pt")
    with torch.no_grad():
        expected = model(**batch, output_attentions=True)
    assert torch.equal(got["last"], expected.last_hidden_state) and torch.equal(got["pooled"], expected.pooler_output)
    assert all(torch.equal(a, e) for a, e in zip(got["attentions"], expected.attentions, strict=True))


def test_hidden_states_survive_copies_and_new_layers():
    """The recording hooks go with a pickled or copied model, and a layer put in later is recorded too."""
    hf, mine = copy.deepcopy(module_pair("small", "BertModel"))  # a copy: its layers are replaced below
    hf.eval(), mine.eval()
    args, kwargs = inputs("small", "BertModel", "flags")
    with torch.no_grad():
        expected = hf(*args, **kwargs)
        mine(*args, **kwargs)  # installs the hooks
        for copied in (pickle.loads(pickle.dumps(mine)), copy.deepcopy(mine)):
            assert_same_output(expected, copied(*args, **kwargs))
        mine.encoder.layer[1] = copy.deepcopy(mine.encoder.layer[1])._apply(lambda t: t)  # a new module object
        mine.encoder.layer[1]._forward_hooks.clear()
        assert_same_output(expected, mine(*args, **kwargs))
