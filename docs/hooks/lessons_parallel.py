"""Lessons not in the cache execute side by side, one process each, before the pages render.

mkdocs-jupyter executes a lesson when it renders its page, one page after another: a cold build
runs nine lessons in a row, each starting a kernel that imports torch and loads the model. This
hook finds the lessons whose cache entry is missing (the entry ``lesson_run.py`` keys on the build's
conditions) and has them executed by ``lesson_render.py`` processes, as many as the machine has
cores, each taking the next lesson when it is done and writing the entry the page's own render
then reads. A lesson that fails leaves no entry: its page renders it again, and the build fails
with its error as it always did.

Each lesson process runs torch on one thread (as many processes as cores), whatever thread count
the environment asks for: a thread count changes how sums are split, so every build computes the
same numbers on a kernel set, and the claims need checking under each kernel set only, not under
each thread count too (``tests/test_claims_under_kernels.py``). Set in this process before
``lesson_run.py`` computes the cache key, so the entry's key says so too.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, cast

log = logging.getLogger("mkdocs.hooks.lessons_parallel")
RENDERER = Path(__file__).with_name("lesson_render.py")
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the colours of IPython's tracebacks


def _parallel() -> int:
    return max(1, os.cpu_count() or 1)


def _options() -> tuple[str, ...]:
    """The plugin options the renderer reads: its own list, so the two files cannot disagree."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("lesson_render", RENDERER)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the renderer {RENDERER}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return (*module.RENDER_OPTIONS, "toc_depth")


def lesson_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` as the lessons run in it: one lesson process per core, one torch thread each, even
    where a thread count is set by hand (torch reads either variable)."""
    return {**env, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def on_config(config):
    # Set before lesson_run.on_config (listed after this hook) keys the cache on the environment.
    os.environ.update(lesson_env(dict(os.environ)))
    return config


def _executed(plugin, path: str) -> bool:
    return not any(pathlib.PurePath(path).match(p) for p in plugin.config["execute_ignore"] or [])


def on_files(files, config):
    from mkdocs_jupyter.plugin import _compute_cache_key, _get_cache_path

    plugin = config.plugins["mkdocs-jupyter"]
    if not (plugin.config["execute"] and plugin.config["cache"]):
        return files
    options = json.dumps({k: plugin.config[k] for k in _options()})
    missing = []
    for file in files:
        if plugin.should_include(file) and _executed(plugin, file.abs_src_path):
            entry = _get_cache_path(
                plugin.config["cache_dir"], _compute_cache_key(file.abs_src_path, plugin.config, True)
            )
            if not entry.exists():
                missing.append((file.abs_src_path, entry))
    if missing:
        _run(missing, options)
    return files


def _run(missing: list[tuple[str, Path]], options: str) -> None:
    import queue
    import threading

    todo: queue.Queue[tuple[str, Path]] = queue.Queue()
    for item in missing:
        todo.put(item)

    def renderer() -> None:
        """One renderer process, fed the next lesson whenever it has finished one."""
        proc = subprocess.Popen(
            [sys.executable, str(RENDERER), options],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        # stdin and stdout are PIPEs with text=True: text streams, never None
        stdin, stdout = cast(IO[str], proc.stdin), cast(IO[str], proc.stdout)
        try:
            while True:
                try:
                    lesson, entry = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    stdin.write(f"{lesson}\t{entry}\n")
                    stdin.flush()
                    status, _, detail = stdout.readline().strip().partition(" ")
                except OSError:
                    status = detail = ""
                if status == "ok":
                    log.info("executed %s (%.0f s)", Path(lesson).name, float(detail))
                    continue
                # Its page's own render runs it again and reports the error in full.
                log.info(
                    "%s did not run through here: %s",
                    Path(lesson).name,
                    ANSI.sub("", detail) if status == "failed" else "the renderer stopped",
                )
                if status != "failed":
                    return
        finally:
            try:
                stdin.close()  # no more lessons: it stops its kernel template and exits
                proc.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()

    start = time.perf_counter()
    count = min(_parallel(), len(missing))
    log.info("executing %d lesson(s), %d at a time", len(missing), count)
    threads = [threading.Thread(target=renderer) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    log.info("lessons executed in %.0f s", time.perf_counter() - start)
