"""``bertlab doctor``: is this installation able to run the course? Each line says OK or the fix."""

from __future__ import annotations

import contextlib
import importlib.metadata as metadata
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping

from bertlab import reference

# Versions the course is tested with (pyproject.toml pins them).
EXPECTED = {
    "torch": "2.13.0",
    "transformers": "5.23.0",
    "sentence-transformers": "6.2.0",
    reference.BUNDLED_PACKAGE: "0.1.0",
    "nbgrader": "0.9.6",
}
FIX_INSTALL = "run `make clean start` to rebuild the course venv"


OFFLINE_VAR = "HF_HUB_OFFLINE"
PROBE_TIMEOUT = 300  # seconds; a cold first import of torch and transformers can be slow
FIX_OFFLINE = (
    "the course must load without a network: use a local model directory "
    f"(--model or ${reference.ENV_VAR}) and leave {OFFLINE_VAR} unset or 1"
)


class NetworkUnreachable(OSError):
    """Raised for every connection attempted inside ``network_cut()``."""


@contextlib.contextmanager
def network_cut() -> Iterator[None]:
    """Make every new connection of this process fail, as on a machine with no network.

    Name lookups and connects are the two doors every HTTP client goes through (urllib, httpx,
    requests); closing both means a hub lookup fails at once instead of waiting for a timeout.
    """

    def unreachable(*args, **kwargs):
        raise NetworkUnreachable(101, "Network is unreachable (cut by bertlab doctor)")

    saved = {name: getattr(socket, name) for name in ("getaddrinfo", "create_connection")}
    saved_methods = {name: getattr(socket.socket, name) for name in ("connect", "connect_ex")}
    try:
        socket.getaddrinfo = socket.create_connection = unreachable
        for name in saved_methods:  # replaced on the class: every socket, made before or after
            setattr(socket.socket, name, unreachable)
        yield
    finally:
        for name, fn in saved.items():
            setattr(socket, name, fn)
        for name, fn in saved_methods.items():
            setattr(socket.socket, name, fn)


def _load_everything(model: str | None) -> None:
    """Load what grading loads: the model, its tokenizer and, for the bundled model, the
    sentence-transformers pipeline Task 6.4 compares with."""
    reference.load_model(model)
    reference.load_tokenizer(model)
    path = reference.model_dir(model)
    if reference.is_bundled(path):
        from sentence_transformers import SentenceTransformer

        SentenceTransformer(str(path), device="cpu")


# Run in a new process started with the given environment: huggingface_hub reads the offline
# variable once, at import, so only a fresh process loads the way a learner's kernel or grading
# worker does. The network is cut before anything is loaded.
_PROBE = """
import sys
from bertlab import doctor
with doctor.network_cut():
    doctor._load_everything(sys.argv[1] or None)
"""


def offline_probe(model: str | None = None, env: Mapping[str, str] | None = None) -> tuple[bool, str]:
    """Load the course's model in a new process whose network is cut.

    Args:
        model: a model directory, as ``--model`` takes it (default: ``$BERTLAB_MODEL``, else bundled).
        env: the environment to load in, as the user's shell has it (default: this process's).

    Returns:
        (ok, detail): whether loading worked with no network; on failure, the error's last line.
    """
    env = dict(os.environ if env is None else env)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE, model or ""],
            env=env,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        return False, f"loading with the network cut took over {PROBE_TIMEOUT} s"
    if proc.returncode == 0:
        return True, ""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    return False, lines[-1] if lines else f"exit status {proc.returncode}"


def offline_check(model: str | None = None, env: Mapping[str, str] | None = None) -> tuple[bool, str, str]:
    """(ok, what, detail or fix) for the offline line: the probe's verdict and the variable's value."""
    value = (os.environ if env is None else env).get(OFFLINE_VAR)
    setting = f"{OFFLINE_VAR}={value}" if value is not None else f"{OFFLINE_VAR} unset, so bertlab sets 1"
    ok, error = offline_probe(model, env)
    if ok:
        return True, "offline", f"loads with the network cut ({setting})"
    return False, "offline", f"loading with the network cut failed ({setting}): {error}; {FIX_OFFLINE}"


def checks(model: str | None = None, env: Mapping[str, str] | None = None) -> Iterator[tuple[bool, str, str]]:
    """Yield (ok, what, detail or fix).

    Args:
        model: ``--model``, if given.
        env: the user's environment before ``bertlab`` changed anything (default: this process's).
    """
    for package, want in EXPECTED.items():
        try:
            have = metadata.version(package)
        except metadata.PackageNotFoundError:
            yield False, package, f"not installed; {FIX_INSTALL}"
            continue
        ok = have.split("+")[0] == want
        yield ok, package, have if ok else f"{have} installed, the course expects {want}; {FIX_INSTALL}"

    try:
        path = reference.model_dir(model)
        reference.validate(path)
        weights = reference.weights_file(path)
        digest = reference.sha256(weights)
        note = "matches the bundled weights" if digest == reference.BUNDLED_SHA256 else "not the bundled model"
        yield True, "model", f"{path}"
        yield True, "weights sha256", f"{digest[:16]}... ({note})"
        config = reference.load_config(model)
        yield (
            True,
            "model loads",
            (
                f"{config.num_hidden_layers} layers, hidden {config.hidden_size}, "
                f"{config.num_attention_heads} heads, intermediate {config.intermediate_size}"
            ),
        )
    except reference.ReferenceError as err:
        yield False, "model", str(err).replace("\n", " ")
    else:
        yield offline_check(model, env)

    yield from grading_platform()
    yield cpu_kernels()

    chromium = shutil.which("chromium")
    yield True, "chromium (browser test only)", chromium or "absent; `make test` installs it"


def grading_platform() -> Iterator[tuple[bool, str, str]]:
    """What runs where: the grading path in use, how its processes start, whether writes are
    sandboxed. Information, never a failure: each path grades alike (see the Setup page)."""
    from bertlab.grading import platforms

    described = platforms.current().describe()
    why = f"{platforms.PORTABLE_ENV}=1" if os.environ.get(platforms.PORTABLE_ENV) == "1" else f"on {sys.platform}"
    yield True, "grading path", f"{described['path']} ({why})"
    yield True, "judges", described["judges"]
    yield True, "learner processes", described["learners"]
    yield True, "sandbox", described["sandbox"]


def cpu_kernels() -> tuple[bool, str, str]:
    """The CPU kernel set PyTorch dispatches here, and the threads it uses: they decide the last
    bits of every number, so a lesson's printed numbers may differ from another machine's in their
    last digits. Information, never a failure: the course is tested under every set (Setup page)."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    asked = os.environ.get("ATEN_CPU_CAPABILITY")
    why = f"ATEN_CPU_CAPABILITY={asked}" if asked else "chosen by PyTorch for this CPU"
    return True, "CPU kernels", f"{capability} ({why}), {torch.get_num_threads()} threads"


def run(model: str | None = None, env: Mapping[str, str] | None = None) -> int:
    """Print one line per check; 0 when every line is OK, else 1."""
    ok_all = True
    for ok, what, detail in checks(model, env):
        ok_all &= ok
        print(f"{'OK ' if ok else 'FIX'}  {what:<30} {detail}")
    return 0 if ok_all else 1
