"""``bertlab gradescope``'s zip, without grading a notebook: its layout, setup.sh's pins checked
against the files that hold them, and results.json for every submission refused before grading
(missing, renamed, too large, not a notebook) or when the grader cannot start, each valid under the
schema written from Gradescope's specification. The graded runs are in test_platforms_agree.py."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
import zipfile
from pathlib import Path

import jsonschema
import pytest

from bertlab import cli
from bertlab.instructor import gradescope, gradescope_run
from bertlab.instructor.gradescope_results import grade_cells
from tests import gradescope_emulation as emulation
from tests.submissions import FFN, ROOT, exercise, max_points

ASSIGNMENT = FFN


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("zip")
    assert cli.main(["gradescope", ASSIGNMENT, "--course", str(ROOT), "--out-dir", str(out)]) == 0
    return out / f"{ASSIGNMENT}-gradescope.zip"


@pytest.fixture
def root(archive, tmp_path) -> Path:
    return emulation.lay_out(archive, tmp_path / "autograder")


def test_the_two_scripts_are_at_the_top_and_executable(archive):
    with zipfile.ZipFile(archive) as zipped:
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in zipped.infolist()}
        config = json.loads(zipped.read("autograder.json"))
        assert (
            zipped.read(f"sources/{ASSIGNMENT}.ipynb")
            == (ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_bytes()
        )
        assert zipped.read("constraints.txt") == (ROOT / "constraints.txt").read_bytes()
        packaged = {n for n in modes if n.startswith("course/src/bertlab/")}
        assert (
            zipped.read("course/src/bertlab/checks/__init__.py")
            == (ROOT / "src/bertlab/checks/__init__.py").read_bytes()
        )
    assert modes["setup.sh"] & 0o111 and modes["run_autograder"] & 0o111, modes
    assert config["assignment"] == ASSIGNMENT and config["bertlab"] == "0.1.0"
    shipped = {f"course/{p.relative_to(ROOT).as_posix()}" for p in (ROOT / "src/bertlab").rglob("*.py")}
    assert shipped <= packaged, sorted(shipped - packaged)[:5]


def test_setup_installs_the_pins_of_the_course(root):
    setup = (root / "source" / "setup.sh").read_text()
    for script in ("setup.sh", "run_autograder"):
        assert subprocess.run(["bash", "-n", str(root / "source" / script)]).returncode == 0, script
    makefile = (ROOT / "Makefile").read_text()
    admitted = re.search(r"^PYTHONS := (.*)$", makefile, re.M).group(1).split()
    (python,) = set(re.findall(r'uv" python install "([\d.]+)"', setup))
    assert python in admitted, (python, admitted)
    assert f'--python "{python}"' in setup
    pip = re.search(r'"pip==([^"]+)"', makefile).group(1)
    assert f'"pip=={pip}"' in setup
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line)
    assert f'"uv=={pins["uv"]}"' in setup
    torch = [
        d
        for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
        if d.startswith("torch==")
    ]
    (line,) = [line for line in setup.splitlines() if "torch==" in line]
    assert f'"{torch[0]}"' in line and '--index-url "https://download.pytorch.org/whl/cpu"' in line, line
    # torch before the course: installed after it, the constraints would let pip take PyPI's CUDA build
    assert setup.index("torch==") < setup.index('-c "$SOURCE/constraints.txt" "$SOURCE/course"')


def test_hidden_grade_cells_are_shown_after_publication_only():
    from bertlab.grading import notebooks
    from bertlab.instructor.gradescope_results import results

    source = notebooks.read(ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    payload = results(ASSIGNMENT, source, [], "error", 1.0, "0.1.0", "why")
    jsonschema.validate(payload, emulation.SCHEMA)
    shown = {t["extra_data"]["grade_id"]: t["visibility"] for t in payload["tests"]}
    assert shown["test-5-1-batches"] == shown["test-5-2-batches"] == "after_published", shown
    assert shown["test-5-1-names"] == "visible"
    assert [c["grade_id"] for c in grade_cells(source)] == list(shown)


def test_the_schema_refuses_what_gradescope_would_not_read():
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"tests": [{"score": 1, "visibility": "secret"}]}, emulation.SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"tests": [{"max_score": 1}]}, emulation.SCHEMA)  # no score anywhere


def _refused(root: Path, files: dict[str, bytes], said: str) -> dict:
    emulation.submit(root, files)
    assert gradescope_run.main(["--root", str(root)]) == 0
    results = json.loads((root / "results" / "results.json").read_text())
    jsonschema.validate(results, emulation.SCHEMA)
    assert results["score"] == 0 and re.search(said, results["output"]), results["output"]
    assert sum(t["max_score"] for t in results["tests"]) == max_points(ASSIGNMENT)
    assert all(t["score"] == 0 and re.search(said, t["output"]) for t in results["tests"])
    return results


def test_a_missing_notebook_scores_zero_and_says_so(root):
    _refused(root, {}, rf"{ASSIGNMENT}\.ipynb was not submitted \(found nothing\)")


def test_a_renamed_notebook_scores_zero_and_says_so(root):
    _refused(root, {"my-work.ipynb": b"{}"}, r"was not submitted \(found my-work\.ipynb\).*own name")


def test_a_notebook_in_a_folder_is_found(root):
    # Uploaded from a repository or as a zip, the notebook can sit below the submission's top.
    emulation.submit(root, {"README.md": b"", f"repo/{ASSIGNMENT}.ipynb": b"{}"})
    assert gradescope_run.find_notebook(root / "submission", ASSIGNMENT, 10**6).parent.name == "repo"


def test_a_notebook_too_large_scores_zero_and_says_so(root):
    emulation.submit(root, {})
    with open(root / "submission" / f"{ASSIGNMENT}.ipynb", "wb") as big:
        big.truncate(gradescope.MAX_MEGABYTES * 10**6 + 1)  # sparse: nothing is written
    assert gradescope_run.main(["--root", str(root)]) == 0
    results = json.loads((root / "results" / "results.json").read_text())
    assert results["score"] == 0 and "over the 50.0 MB" in results["output"], results["output"]


def test_a_file_that_is_not_a_notebook_scores_zero_and_says_so(root):
    _refused(root, {f"{ASSIGNMENT}.ipynb": b"\x89PNG not json"}, r"is not a valid notebook")


def test_a_grader_that_cannot_start_still_writes_a_result(root):
    emulation.submit(root, {f"{ASSIGNMENT}.ipynb": json.dumps(exercise(ASSIGNMENT)).encode()})
    results = emulation.run(root, python="/bin/false")
    assert results["score"] == 0 and "could not start (exit status 1)" in results["output"], results


def test_a_grader_that_fails_still_writes_a_result(root):
    (root / "source" / "sources" / f"{ASSIGNMENT}.ipynb").write_text("not json")
    emulation.submit(root, {f"{ASSIGNMENT}.ipynb": b"{}"})
    assert gradescope_run.main(["--root", str(root)]) == 0
    results = json.loads((root / "results" / "results.json").read_text())
    jsonschema.validate(results, emulation.SCHEMA)
    assert results["score"] == 0 and "could not grade this submission" in results["output"], results
