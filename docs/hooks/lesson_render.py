"""Execute lessons and write each page into mkdocs-jupyter's cache, as its own render would.

Usage (by ``lessons_parallel.py`` only): ``python lesson_render.py OPTIONS_JSON``, then one line
``LESSON<TAB>CACHE_FILE`` per lesson on stdin; for each, one line on stdout: ``ok SECONDS`` or
``failed ERROR``.

A few of these processes run side by side, each taking the next lesson when it is done with one, so
that several lessons execute at once and each process pays for its imports (nbconvert, jupytext,
mkdocs: two seconds) once, not once per lesson. Every lesson still runs in a kernel of its own, a
fork of a template that imported torch, transformers and the course once (``bertlab.kernel_template``); on
the portable path (macOS, ``BERTLAB_PORTABLE=1``) an ordinary kernel. The cache file holds what
mkdocs-jupyter (0.26) writes after executing a page: the HTML, its TOC tokens and its title. It is
written only when the lesson ran through: a lesson that fails is left to the build's own render,
which reports the failure the usual way.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

# The options mkdocs-jupyter passes to nb2html; the rest of its configuration does not reach it.
RENDER_OPTIONS = (
    "kernel_name",
    "theme",
    "allow_errors",
    "show_input",
    "no_input",
    "no_prompt",
    "remove_tag_config",
    "highlight_extra_classes",
    "include_requirejs",
    "custom_mathjax_url",
)


def render(lesson: str, cache_file: str, options: dict) -> None:
    from mkdocs_jupyter import convert
    from mkdocs_jupyter.plugin import _get_nb_toc_tokens

    body = convert.nb2html(lesson, execute=True, **{k: options[k] for k in RENDER_OPTIONS})
    toc_tokens, title = _get_nb_toc_tokens(lesson, options["toc_depth"])
    target = Path(cache_file)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    partial.write_text(json.dumps({"content": body, "toc_tokens": toc_tokens, "title": title}), encoding="utf-8")
    partial.replace(target)  # whole or absent: a build never reads half a page


def serve(options: dict) -> None:
    import os
    import tempfile

    from bertlab import kernel_template
    from bertlab.grading import platforms

    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever a library prints must not be read as an answer
    if platforms.is_portable():  # no fork after torch's imports there: each kernel starts anew
        _render_each(options, answers)
        return
    with tempfile.TemporaryDirectory(prefix="bertlab-lessons-") as tmp:
        template = kernel_template.start(Path(tmp), options["kernel_name"] or "python3")
        try:
            _render_each(options, answers)
        finally:
            template.kill()
            template.wait()


def _render_each(options: dict, answers) -> None:
    for line in sys.stdin:
        lesson, cache_file = line.rstrip("\n").split("\t")
        began = time.perf_counter()
        try:
            render(lesson, cache_file, options)
        except Exception as err:  # noqa: BLE001  (the page's own render reports it in full)
            last = (str(err).strip().splitlines() or [type(err).__name__])[-1]
            print(f"failed {last}", file=answers, flush=True)
        else:
            print(f"ok {time.perf_counter() - began:.1f}", file=answers, flush=True)


if __name__ == "__main__":
    serve(json.loads(sys.argv[1]))
