"""Execute one lesson and write its page into mkdocs-jupyter's cache, as its own render would.

Usage (by ``lessons_parallel.py`` only): ``python lesson_render.py LESSON CACHE_FILE OPTIONS_JSON``.

A process of its own per lesson, so that several lessons execute at once; the cache file holds
what mkdocs-jupyter (0.26) writes after executing a page: the HTML, its TOC tokens and its title.
It is written only when the lesson ran through: a lesson that fails is left to the build's own
render, which reports the failure the usual way.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# The options mkdocs-jupyter passes to nb2html; the rest of its configuration does not reach it.
RENDER_OPTIONS = ("kernel_name", "theme", "allow_errors", "show_input", "no_input", "no_prompt",
                  "remove_tag_config", "highlight_extra_classes", "include_requirejs", "custom_mathjax_url")


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


if __name__ == "__main__":
    render(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
