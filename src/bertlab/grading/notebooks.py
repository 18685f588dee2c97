"""Find the notebooks to grade and prepare the copy that is actually run."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bertlab.grading.results import grade_cell_meta


class GradingError(Exception):
    """Nothing can be graded (bad arguments, no notebooks); the message says why."""


def course_root(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` holding ``nbgrader_config.py``."""
    for folder in (start, *start.parents):
        if (folder / "nbgrader_config.py").is_file():
            return folder
    return None


def course_key(start: Path | None = None) -> str:
    """A short name for this Python environment and the course at or above ``start`` (default:
    the working directory): two clones of the course never share warm judges or records, even
    with one environment between them."""
    import hashlib
    import sys

    root = course_root(start or Path.cwd())
    return hashlib.sha256(f"{sys.prefix}\0{root or ''}".encode()).hexdigest()[:12]


def discover(path: Path) -> dict[str, list[Path]]:
    """Task name -> its notebooks: one sub-directory per task (``03-self-attention/``)."""
    if not path.is_dir():
        raise GradingError(f"{path} is not a directory (use --path to point at your exercises/)")
    tasks = {
        folder.name: sorted(folder.glob("*.ipynb"))
        for folder in sorted(path.iterdir())
        if folder.is_dir() and not folder.name.startswith(".")
    }
    tasks = {name: nbs for name, nbs in tasks.items() if nbs}
    if not tasks:
        raise GradingError(f"no notebooks found under {path}/ (expected {path}/NN-name/NN-name.ipynb)")
    return tasks


def select(tasks: dict[str, list[Path]], wanted: list[str]) -> dict[str, list[Path]]:
    """Keep the tasks named by number (``3``, ``03``) or name prefix (``03-self``)."""
    if not wanted:
        return tasks
    chosen: dict[str, list[Path]] = {}
    for want in wanted:
        matches = [name for name in tasks if _matches(name, want)]
        if not matches:
            raise GradingError(f"no task matches {want!r}; tasks here: {', '.join(tasks)}")
        chosen.update({name: tasks[name] for name in matches})
    return chosen


def _matches(name: str, want: str) -> bool:
    if want.isdigit():
        number = re.match(r"\d+", name)
        return number is not None and int(number.group()) == int(want)
    return name.startswith(want)


class Node(dict):
    """A notebook's JSON with attribute access (``nb.cells``, ``cell.source``), like nbformat's."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        self[name] = value


def _node(value):
    if isinstance(value, dict):
        return Node({key: _node(item) for key, item in value.items()})
    if isinstance(value, list):
        return [_node(item) for item in value]
    return value


def _cells_of(data) -> list:
    """The cells of a v4 notebook's JSON, sources joined; ValueError when it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise ValueError("no list of cells")
    for cell in data["cells"]:
        if not isinstance(cell, dict) or not isinstance(cell.get("cell_type"), str):
            raise ValueError("a cell without a cell_type")
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(line, str) for line in source):
            source = "".join(source)
        if not isinstance(source, str):
            raise ValueError("a cell whose source is not text")
        cell["source"] = source
        if not isinstance(cell.setdefault("metadata", {}), dict):
            raise ValueError("a cell whose metadata is not a mapping")
    return data["cells"]


def read(path: Path) -> Node:
    """Read a notebook, turning any corruption into a GradingError that names the file.

    Plain JSON rather than nbformat: grading only needs the cells, and nbformat's schema
    validation costs a second of imports in every grading process. Notebooks older than
    format 4 are upgraded by nbformat, as nbgrader would.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("nbformat", 4) < 4:
            import nbformat

            data = json.loads(nbformat.writes(nbformat.reads(json.dumps(data), as_version=4)))
        _cells_of(data)
        return _node(data)
    except Exception as err:  # invalid JSON, not a notebook, unreadable file
        raise GradingError(f"{path.name} is not a valid notebook ({type(err).__name__}: {err})") from err


def write(nb, path: Path) -> None:
    """Write ``nb`` (a ``Node`` or an nbformat notebook) as notebook JSON."""
    Path(path).write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")


def restore_locked_cells(nb, source_nb) -> list[str]:
    """Give grade cells and locked cells the instructor's source, as nbgrader autograde does.

    This brings back hidden tests and undoes edits to the tests and to the given (locked)
    code; cells are matched by ``grade_id``, wherever the learner moved them. Returns the ids
    of grade cells missing from ``nb`` (deleted by the learner).
    """
    source = {
        meta["grade_id"]: cell
        for cell in source_nb.cells
        if (meta := cell.get("metadata", {}).get("nbgrader", {}))
        and (meta.get("grade") or meta.get("locked"))
        and meta.get("grade_id")
    }
    seen = set()
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        grade_id = meta.get("grade_id")
        if grade_id in source:
            cell.source = source[grade_id].source
            cell.metadata["nbgrader"] = dict(source[grade_id].metadata["nbgrader"])
            seen.add(grade_id)
        elif meta.get("grade") or meta.get("locked"):
            # Not the instructor's: a cell cannot give itself points or pass as given code.
            cell.metadata["nbgrader"] = {**meta, "grade": False, "locked": False}
    return [g for g, cell in source.items() if grade_cell_meta(cell) and g not in seen]


def source_notebooks(task_folder: Path) -> list[Path]:
    """The nbgrader source notebooks (``solutions/<task>/*.ipynb``) of a learner's task folder."""
    root = course_root(task_folder.resolve())
    if root is None:
        return []
    folder = root / "solutions" / task_folder.name
    if folder.resolve() == task_folder.resolve():
        return []  # grading the sources themselves
    return sorted(folder.glob("*.ipynb"))
