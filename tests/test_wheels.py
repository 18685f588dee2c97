"""The pinned dependency set resolves, as wheels only, on Linux, macOS and Windows, for every Python
the Makefile admits (``PYTHONS``); and the pins it names as keeping the next Python out are those.

Nothing is installed: for each target, `uv pip compile` resolves pyproject.toml's dependencies and
its `dev` extra (what `make start` installs) under constraints.txt, for that platform and Python,
from the package index. uv evaluates environment markers for the target, so torch's Linux-only CUDA
packages are asked for on Linux only (pip's `--platform` evaluates them for this machine and fails).

`--python-version 3.11` means 3.11.0: a pin whose release requires a later 3.11.x fails here, as it
would for a learner on an early 3.11. The resolutions (three platforms for each Python) run at
once, in one fixture; uv's own cache keeps a rerun to seconds. They need the package index:
offline they are skipped, except under CI, which installs from the index and so must reach it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from tests.docs_hooks import load_hook

ROOT = Path(__file__).resolve().parents[1]
UV = Path(sys.executable).parent / "uv"


pythons = load_hook("pythons")  # reads the Makefile's list
PYTHONS = tuple(pythons.admitted())
# (name, uv's --python-platform, extra environment)
PLATFORMS: tuple[tuple[str, str, dict[str, str]], ...] = (
    # glibc 2.28, the oldest Linux docs/setup.md promises (torch 2.13.0's wheels are manylinux_2_28)
    ("linux-x86_64", "x86_64-manylinux_2_28", {}),
    # uv's default macOS floor for this triple is 13.0, and torch 2.13.0's only macOS wheel is
    # macosx_14_0_arm64: the learner's Mac runs macOS 14 or newer (docs/setup.md says so).
    ("macos-arm64", "aarch64-apple-darwin", {"MACOSX_DEPLOYMENT_TARGET": "14.0"}),
    ("windows-x86_64", "x86_64-pc-windows-msvc", {}),
)
TARGETS = [(platform, python) for platform, _, _ in PLATFORMS for python in PYTHONS]

# What uv says when it could not reach the index (as opposed to "No solution found").
NETWORK_ERROR = re.compile(
    r"Failed to fetch|error sending request|client error \(Connect\)|dns error|tcp connect error"
    r"|timed out|Network connectivity is disabled"
)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("wheels"), pytest.mark.timeout(600)]


@dataclass
class Resolution:
    returncode: int
    stderr: str
    pins: dict[str, str]  # canonical name -> version, as resolved


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def requirements() -> list[str]:
    meta = project()
    return meta["dependencies"] + meta["optional-dependencies"]["dev"]


def constraints() -> dict[str, str]:
    pins: dict[str, str] = {}
    for text in (ROOT / "constraints.txt").read_text().splitlines():
        line = text.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


def compile_for(
    platform: str, python: str, requirements_in: Path, out_dir: Path, constraints_txt: Path = ROOT / "constraints.txt"
) -> Resolution:
    _, triple, extra_env = next(p for p in PLATFORMS if p[0] == platform)
    output = out_dir / f"{platform}-py{python}.txt"
    command = [
        str(UV),
        "pip",
        "compile",
        str(requirements_in),
        "-c",
        str(constraints_txt),
        "--only-binary",
        ":all:",
        "--python-platform",
        triple,
        "--python-version",
        python,
        "--no-header",
        "--color",
        "never",
        # Nothing is built, so this interpreter does: without these, uv looks for (and tries to
        # download) a Python of the target version first.
        "--python",
        sys.executable,
        "--no-python-downloads",
        "--output-file",
        str(output),
    ]
    env = {**os.environ, **extra_env}
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=540)
    except subprocess.TimeoutExpired as timeout:
        return Resolution(-1, f"uv did not finish in {timeout.timeout} s", {})
    pins: dict[str, str] = {}
    if done.returncode == 0:
        for line in output.read_text().splitlines():
            match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
            if match:
                pins[canonicalize_name(match[1])] = match[2]
    return Resolution(done.returncode, done.stderr, pins)


@pytest.fixture(scope="session")
def resolutions(tmp_path_factory) -> dict[tuple[str, str], Resolution]:
    """All the resolutions, run concurrently (uv's cache is shared safely between processes)."""
    if not UV.exists():
        pytest.fail(f"uv is not in the venv ({UV}); `pip install -c constraints.txt -e '.[dev]'` installs it")
    out_dir = tmp_path_factory.mktemp("wheels")
    requirements_in = out_dir / "requirements.in"
    requirements_in.write_text("\n".join(requirements()) + "\n")
    with ThreadPoolExecutor(len(TARGETS)) as pool:
        futures = {target: pool.submit(compile_for, *target, requirements_in, out_dir) for target in TARGETS}
        return {target: future.result() for target, future in futures.items()}


@pytest.mark.parametrize("platform,python", TARGETS, ids=[f"{p}-py{v}" for p, v in TARGETS])
def test_pinned_set_resolves_as_wheels(resolutions, platform, python):
    target = f"{platform}, Python {python}"
    assert SpecifierSet(project()["requires-python"]).contains(f"{python}.0"), (
        f"pyproject.toml's requires-python does not admit Python {python}, which this test checks"
    )
    result = resolutions[(platform, python)]
    if result.returncode != 0:
        if "No solution found" not in result.stderr and NETWORK_ERROR.search(result.stderr):
            message = f"{target}: uv could not reach the package index:\n{result.stderr}"
            if os.environ.get("CI"):
                pytest.fail(message + "\n(CI installs from the index, so it must reach it)")
            pytest.skip(message)
        pytest.fail(f"{target}: the pinned set does not resolve as wheels only. uv says:\n{result.stderr}")

    pins = constraints()
    moved = {
        name: (pins[name], version) for name, version in result.pins.items() if name in pins and pins[name] != version
    }
    assert not moved, f"{target}: resolved away from constraints.txt (pinned, resolved): {moved}"
    for line in requirements():
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in result.pins, f"{target}: {requirement} is missing from the resolution"
        assert requirement.specifier.contains(result.pins[name], prereleases=True), (
            f"{target}: {requirement} resolved to {result.pins[name]}"
        )


def skip_if_unreachable(target: str, result: Resolution) -> None:
    if result.returncode != 0 and "No solution found" not in result.stderr and NETWORK_ERROR.search(result.stderr):
        message = f"{target}: uv could not reach the package index:\n{result.stderr}"
        if os.environ.get("CI"):
            pytest.fail(message + "\n(CI installs from the index, so it must reach it)")
        pytest.skip(message)


def test_the_pins_named_for_the_next_python_are_what_keeps_it_out(tmp_path):
    """The Makefile's NEXT_PYTHON_HELD_BY (which the gate and the Setup page name) is true: no pin it
    names has a wheel for NEXT_PYTHON on any platform, and with those unpinned the rest of the set
    resolves for it everywhere. It fails once a named pin gains a wheel or another pin lacks one."""
    python = pythons.variable("NEXT_PYTHON")
    held = pythons.held_back()
    names = {canonicalize_name(name) for name, _ in held}
    unpinned = tmp_path / "unpinned.in"
    unpinned.write_text(
        "".join(
            (name if canonicalize_name(name) in names else line) + "\n"
            for line, name in ((line, Requirement(line).name) for line in requirements())
        )
    )
    constraints_txt = tmp_path / "constraints.txt"
    constraints_txt.write_text(
        "".join(f"{name}=={version}\n" for name, version in constraints().items() if name not in names)
    )
    # (platform, "rest" or a held pin's name) -> what to resolve; each job writes into a folder of its own
    jobs = {(platform, "rest"): unpinned for platform, _, _ in PLATFORMS}
    for name, version in held:
        (tmp_path / f"{name}.in").write_text(f"{name}=={version}\n")
        jobs |= {(platform, name): tmp_path / f"{name}.in" for platform, _, _ in PLATFORMS}
    for platform, what in jobs:
        (tmp_path / platform / what).mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = {
            (platform, what): pool.submit(
                compile_for, platform, python, requirements_in, tmp_path / platform / what, constraints_txt
            )
            for (platform, what), requirements_in in jobs.items()
        }
        results = {job: future.result() for job, future in futures.items()}
    for (platform, what), result in results.items():
        skip_if_unreachable(f"{platform}, Python {python}", result)
        if what == "rest":
            assert result.returncode == 0, (
                f"{platform}, Python {python}: with {sorted(names)} unpinned, the set still does not resolve "
                f"as wheels, so NEXT_PYTHON_HELD_BY misses a pin. uv says:\n{result.stderr}"
            )
        else:
            assert result.returncode != 0, (
                f"{platform}, Python {python}: {what} as pinned resolves as wheels now: "
                "drop it from NEXT_PYTHON_HELD_BY (and from the Setup page's table)"
            )
