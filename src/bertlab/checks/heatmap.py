"""A picture of where a learner's output differs from the expected one: |got - expected| as a heatmap.

Drawn only when a values check fails, from the plain tensors the check compared (``Difference``),
in the process that compared them: the grader's judge or the learner's own notebook kernel. The
feedback text is unchanged; the picture goes beside it (inline in Jupyter, on the site's Progress
page through ``bertlab grade``).

What is drawn, for an output of any shape:

- every leading dimension but the last two is fixed at the worst element's index (the one the
  message names), so a (batch, token, dim) output shows the worst sentence's tokens x features;
- rows or columns beyond ``MAX_CELLS`` are binned, each bin showing its largest difference, so a
  384-wide hidden state stays readable;
- for an output given per layer (``hidden_states[i]``), a second panel: layers x tokens, each
  cell the largest difference over the features, so the first layer that goes wrong stands out.
"""

from __future__ import annotations

import base64
import io
import math
import sys

import numpy as np
import torch

from bertlab.checks.compare import Difference

MAX_CELLS = 64  # rows or columns drawn at most before binning


def values_of(err: BaseException) -> Difference | None:
    """The ``Difference`` behind a failure: its own ``values`` (a failure re-raised with more
    lines keeps them, ``CheckFailed.adding``), never one of an earlier, handled failure."""
    values = getattr(err, "values", None)
    return values if isinstance(values, Difference) else None


def _abs_diff(expected: torch.Tensor, got: torch.Tensor) -> np.ndarray:
    """|got - expected| as float64 numpy; NaN wherever ``got`` is not finite."""
    diff = (got.double() - expected.double()).abs().numpy()
    diff[~np.isfinite(got.double().numpy())] = np.nan
    return diff


def _worst(diff: np.ndarray) -> tuple[int, ...]:
    """Index of the largest difference; a non-finite value counts as the largest."""
    ranked = np.where(np.isnan(diff), np.inf, diff)
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(ranked)), diff.shape))


def _bin(plane: np.ndarray, axis: int) -> tuple[np.ndarray, int]:
    """Bins of ``plane`` along ``axis`` so at most ``MAX_CELLS`` remain, each its maximum; (bins, width)."""
    size = plane.shape[axis]
    width = math.ceil(size / MAX_CELLS)
    if width == 1:
        return plane, 1
    pad = [(0, 0), (0, 0)]
    pad[axis] = (0, width * math.ceil(size / width) - size)
    padded = np.pad(plane, pad, constant_values=0.0)  # differences are >= 0: padding never wins
    moved = np.moveaxis(padded, axis, -1)
    binned = moved.reshape(*moved.shape[:-1], -1, width).max(axis=-1)  # a NaN (non-finite got) wins its bin
    return np.moveaxis(binned, -1, axis), width


def _plane(
    diff: np.ndarray, dims: tuple[str, ...], index: tuple[int, ...]
) -> tuple[np.ndarray, list[str], tuple[str, str]]:
    """(2-D array, what was fixed, (row name, column name)): leading dims fixed at ``index``."""
    names = dims if len(dims) == diff.ndim else tuple(f"dim{i}" for i in range(diff.ndim))
    fixed = [f"{names[i]} {index[i]}" for i in range(max(0, diff.ndim - 2))]
    plane = diff[tuple(index[: max(0, diff.ndim - 2)])]
    if plane.ndim == 0:
        return plane.reshape(1, 1), fixed, ("", "")
    if plane.ndim == 1:
        return plane[None, :], fixed, ("", names[-1])
    return plane, fixed, (names[-2], names[-1])


def _layer_panel(values: Difference, index: tuple[int, ...]) -> np.ndarray:
    """(layers, second-to-last dim): each layer's largest difference over the last dim, leading dims fixed."""
    rows = []
    for _, expected, got in values.layers:
        plane, _, _ = _plane(_abs_diff(expected, got), values.dims, index)
        rows.append(plane.max(axis=-1))  # NaN where any feature is non-finite
    return np.stack(rows)


def figure(values: Difference):
    """A matplotlib Figure (no pyplot: nothing global changes) of |got - expected|."""
    from matplotlib.figure import Figure

    diff = _abs_diff(values.expected, values.got)
    index = _worst(diff)
    plane, fixed, (row_name, col_name) = _plane(diff, values.dims, index)
    plane, row_width = _bin(plane, 0)
    plane, col_width = _bin(plane, 1)
    panels = 2 if values.layers and diff.ndim >= 2 else 1
    fig = Figure(figsize=(5.2 * panels, 3.2), dpi=90, layout="constrained")
    axes = fig.subplots(1, panels, squeeze=False)[0]
    cmap = _cmap()

    ax = axes[0]
    image = ax.imshow(plane, aspect="auto", cmap=cmap, vmin=0, interpolation="nearest")
    ax.set_xlabel(col_name + (f" (bins of {col_width}, max)" if col_width > 1 else ""))
    ax.set_ylabel(row_name + (f" (bins of {row_width}, max)" if row_width > 1 else ""))
    if plane.shape[0] == 1:
        ax.set_yticks([])
    # The element the message names, outlined.
    row = index[-2] // row_width if diff.ndim >= 2 else 0
    col = index[-1] // col_width if diff.ndim >= 1 else 0
    ax.add_patch(_outline(col, row))
    where = f" ({', '.join(fixed)})" if fixed else ""
    ax.set_title(f"|got - expected| of `{values.name}`{where}", fontsize=9)
    fig.colorbar(image, ax=ax, shrink=0.9)
    if np.isnan(plane).any():
        ax.text(0.0, -0.32, "white: got is NaN or inf", transform=ax.transAxes, fontsize=8)

    if panels == 2:
        ax = axes[1]
        layers = _layer_panel(values, index)
        layers, width = _bin(layers, 1)
        image = ax.imshow(layers, aspect="auto", cmap=cmap, vmin=0, interpolation="nearest")
        base = values.name.split("[")[0]
        ax.set_yticks(range(len(values.layers)), [name[len(base) :].strip("[]") for name, _, _ in values.layers])
        ax.set_ylabel(f"{base}[i]")
        ax.set_xlabel(row_name + (f" (bins of {width}, max)" if width > 1 else ""))
        ax.set_title(f"per layer, max over {col_name}", fontsize=9)
        fig.colorbar(image, ax=ax, shrink=0.9)
    return fig


def _cmap():
    import matplotlib

    return matplotlib.colormaps["magma"].with_extremes(bad="white")  # NaN: a non-finite output


def _outline(x: int, y: int):
    from matplotlib.patches import Rectangle

    return Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, edgecolor="cyan", linewidth=1.5)


def png(values: Difference) -> bytes:
    """The heatmap as PNG bytes (matplotlib's Agg renderer, no screen needed)."""
    buffer = io.BytesIO()
    figure(values).savefig(buffer, format="png")
    return buffer.getvalue()


def encoded(err: BaseException) -> str | None:
    """The heatmap of a failure as base64 PNG text (JSON-safe), or None when no values differ."""
    values = values_of(err)
    return None if values is None else base64.b64encode(png(values)).decode("ascii")


def show_in_notebook(err: BaseException) -> None:
    """Display the heatmap of a failure inline, when running in a Jupyter kernel; else do nothing.

    Never raises: the picture is an extra, the failure message is the feedback.
    """
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    # A kernel's shell has a `kernel`; the grader's plain InteractiveShell has none.
    if shell is None or getattr(shell, "kernel", None) is None:
        return
    values = values_of(err)
    if values is None:
        return
    try:
        from IPython.display import Image, display

        display(Image(data=png(values), format="png"))
    except Exception:  # noqa: BLE001  (a drawing problem must not hide the failure)
        pass
