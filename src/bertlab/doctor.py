"""``bertlab doctor``: is this installation able to run the course? Each line says OK or the fix."""

from __future__ import annotations

import importlib.metadata as metadata
import os
import shutil
from typing import Iterator

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


def checks(model: str | None = None) -> Iterator[tuple[bool, str, str]]:
    """Yield (ok, what, detail or fix)."""
    for package, want in EXPECTED.items():
        try:
            have = metadata.version(package)
        except metadata.PackageNotFoundError:
            yield False, package, f"not installed; {FIX_INSTALL}"
            continue
        ok = have.split("+")[0] == want
        yield ok, package, have if ok else f"{have} installed, the course expects {want}; {FIX_INSTALL}"

    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    yield offline, "offline mode", "HF_HUB_OFFLINE=1" if offline else "set HF_HUB_OFFLINE=1 (bertlab sets it itself)"

    try:
        path = reference.model_dir(model)
        reference.validate(path)
        weights = reference.weights_file(path)
        digest = reference.sha256(weights)
        note = "matches the bundled weights" if digest == reference.BUNDLED_SHA256 else "not the bundled model"
        yield True, "model", f"{path}"
        yield True, "weights sha256", f"{digest[:16]}... ({note})"
        config = reference.load_config(model)
        yield True, "model loads", (
            f"{config.num_hidden_layers} layers, hidden {config.hidden_size}, "
            f"{config.num_attention_heads} heads, intermediate {config.intermediate_size}"
        )
    except reference.ReferenceError as err:
        yield False, "model", str(err).replace("\n", " ")

    chromium = shutil.which("chromium")
    yield True, "chromium (browser test only)", chromium or "absent; `make test` installs it"


def run(model: str | None = None) -> int:
    ok_all = True
    for ok, what, detail in checks(model):
        ok_all &= ok
        print(f"{'OK ' if ok else 'FIX'}  {what:<30} {detail}")
    return 0 if ok_all else 1
