"""The learner's process: runs a notebook's cells and answers the judge's requests.

Usage (by the judge only): ``python -m bertlab.grading.learner REQUEST_FD ANSWER_FD``.

Everything the learner wrote runs here and only here. The judge asks this process to run a cell,
to look a name up, to call a class or function through the harness (``checks/harness.py``) on
inputs the judge chose, and to read attributes. Answers are plain data (``wire.encode``); the
verdict is made in the judge, which never runs learner code. Whatever a learner's cell rebinds
or patches here (``check``, ``bertlab.checks``, torch) cannot change what the judge concludes.
"""

from __future__ import annotations

import os

os.environ.setdefault("MPLBACKEND", "Agg")  # a learner's plt.show() must not need a screen


def _describe(obj) -> dict:
    """What the judge may know of an object that stays here: its type, and for classes their bases."""
    from torch import nn

    cls = obj if isinstance(obj, type) else type(obj)
    torch_base = next((c for c in cls.__mro__ if c.__module__.startswith("torch.nn")), None)
    return {
        "is_class": isinstance(obj, type),
        "callable": callable(obj),
        "type": f"{type(obj).__module__}.{type(obj).__qualname__}",
        "name": getattr(obj, "__name__", type(obj).__name__)
        if isinstance(getattr(obj, "__name__", None), str)
        else type(obj).__name__,
        "torch_base": f"{torch_base.__module__}.{torch_base.__qualname__}"
        if torch_base and isinstance(obj, nn.Module)
        else None,
        "mro": [f"{c.__module__}.{c.__qualname__}" for c in cls.__mro__][:20],
        "repr": _short_repr(obj),
    }


def _short_repr(obj) -> str:
    try:
        text = repr(obj)
    except Exception:  # noqa: BLE001  (a learner's __repr__ may raise)
        text = f"<{type(obj).__name__}>"
    return text if len(text) <= 200 else text[:197] + "..."


def _fresh_pretrained():
    """A copy of the reference model that no earlier call (or learner cell) can have changed."""
    import copy

    from bertlab import reference

    global _PRISTINE
    if _PRISTINE is None:
        _PRISTINE = copy.deepcopy(reference.load_model())
    return copy.deepcopy(_PRISTINE)


_PRISTINE = None


class Server:
    def __init__(self, request_fd: int, answer_fd: int):
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets.config import Config

        self.request_fd, self.answer_fd = request_fd, answer_fd
        config = Config()
        config.HistoryManager.enabled = False  # grading must not write to the learner's IPython history
        self.shell = InteractiveShell(config=config)
        self.objects: dict[int, object] = {}
        self.tensors: dict = {}  # large inputs the judge sent once (see wire.SentTensors)

    def keep(self, obj) -> dict:
        from bertlab.grading.wire import TAG

        handle = len(self.objects) + 1
        while handle in self.objects:
            handle += 1
        self.objects[handle] = obj
        return {TAG: "handle", "id": handle, "meta": _describe(obj)}

    def answer(self, value) -> list:
        from bertlab.grading.wire import answer_parts, encode

        return answer_parts(("ok", encode(value, self.keep)))

    def handle(self, request) -> bytes | list:
        from bertlab.checks import harness
        from bertlab.grading.wire import dump_answer

        op, *args = request
        if op == "release":  # handles the judge no longer holds, sent with its next request
            handles, inner = args
            for handle in handles:
                self.objects.pop(handle, None)
            return self.handle(inner)
        if op == "load_weights":  # on lent tensors: the held ones themselves
            versions = {key: t._version for key, t in self.tensors.items()}
            try:
                harness.load_weights(*args)
                error = None
            except RuntimeError as err:
                error = str(err)[:2000]
            written = [key for key, t in self.tensors.items() if t._version != versions.get(key)]
            return self.answer({"error": error, "written": written})
        if op == "run_cell":
            (source,) = args
            run = self.shell.run_cell(source, store_history=True)
            raised = run.error_before_exec or run.error_in_exec
            text = None if raised is None else f"{type(raised).__name__}: {raised}".strip()
            if raised is not None and harness.unreadable_reference(raised):
                text = f"{harness.unreadable_reference(raised)}: the tasks are written with torch alone"
            where = harness.learner_line(raised.__traceback__) if raised is not None else ""
            return self.answer({"error": text, "where": where})
        if op == "lookup":
            (name,) = args
            if name not in self.shell.user_ns:
                return dump_answer(("missing", name))
            return self.answer(self.shell.user_ns[name])
        if op in ("invoke", "gradients"):
            if op == "invoke":
                target, call_args, kwargs, options = args
                outcome = harness.invoke(target, call_args, kwargs, **options)
            else:
                target, call_args, options = args
                outcome = harness.gradients(target, *call_args, **options)
            return self.answer(
                {
                    "kind": outcome.kind,
                    "value": outcome.value,
                    "error": outcome.error,
                    "where": outcome.where,
                    "changed": outcome.changed,
                    "shortcut": outcome.shortcut,
                }
            )
        # getattr / setattr / list / len / getitem run the learner's code too (properties, __iter__)
        try:
            if op == "getattr":
                return self.answer(getattr(args[0], args[1]))
            if op == "setattr":
                setattr(args[0], args[1], args[2])
                return self.answer(None)
            if op == "list":
                return self.answer(list(args[0]))
            if op == "state_shapes":
                return self.answer(harness.state_shapes(args[0]))
            if op == "state_digest":
                return self.answer(harness.state_digest(args[0]))
            if op == "len":
                return self.answer(len(args[0]))
            if op == "getitem":
                return self.answer(args[0][args[1]])
        except (Exception, SystemExit) as err:  # noqa: BLE001  (reported to the judge as the learner's error)
            return dump_answer(("raise", type(err).__name__, str(err)[:2000]))
        return dump_answer(("raise", "ValueError", f"unknown request {op!r}"))

    def serve(self) -> None:
        from bertlab.grading.wire import ChannelClosed, dump_answer, load_request, read_frame, write_frame

        while True:
            try:
                request = load_request(read_frame(self.request_fd), self.objects, _fresh_pretrained, self.tensors)
            except ChannelClosed:
                return
            except Exception as err:  # noqa: BLE001  (the grader's own request, unreadable here: not the learner's doing)
                text = f"the grader's request could not be read in the notebook's process: {type(err).__name__}: {err}"
                write_frame(self.answer_fd, dump_answer(("raise", "RuntimeError", text[:2000])))
                continue
            try:
                answer = self.handle(request)
            except (Exception, SystemExit) as err:  # noqa: BLE001  (an answer that cannot be encoded, say: the judge reports it)
                answer = dump_answer(("raise", "RuntimeError", f"{type(err).__name__}: {err}"[:2000]))
            write_frame(self.answer_fd, answer)


def preload() -> None:
    """What notebooks load in their cells, loaded before a notebook arrives: pyplot, and the
    course's pretrained model and tokenizer that ``bertlab.reference.load_model()`` returns in a
    learner's process (in every notebook whose checks hand the learner's code the model). A
    learner process started from a process that preloaded (a template's fork, a spare) has its
    own copy: what one notebook does to the model it loaded, no other sees. The model is what any
    notebook may load, not what it is compared with: the judge alone loads its recorded
    activations. Nothing here imports transformers: a process forked after this must hold none of
    its code. Loading starts no thread, so forking after it is safe where forking is."""
    import IPython.core.interactiveshell  # noqa: F401
    import matplotlib.pyplot  # noqa: F401  (the Agg backend: set above)
    import torch

    import bertlab.checks.harness  # noqa: F401
    from bertlab import bert

    # Nothing here may start torch's thread pool: a fork of this process would hang in its first
    # parallel op. With one thread, an op that would have run in parallel runs inline instead.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        bert.load_model()
        bert.load_tokenizer()
    except Exception:  # noqa: BLE001  (a broken model is reported where a notebook or a check loads it)
        pass
    finally:
        torch.set_num_threads(threads)


def main(request_fd: str, answer_fd: str, system) -> None:
    """Serve the judge on two pipe ends, confined as ``system`` (the platform module that started
    this process: it is passed in, since the platforms sit below this program and do not import
    it back) allows."""
    from bertlab import reference
    from bertlab.grading import confinement
    from bertlab.grading.wire import READY, write_frame

    try:
        system.guard_parent()  # a learner process outlives no judge
        reference.serve_course_modules()  # the notebook's load_model() and the grader's parts: bertlab.bert
        # The learner's prints go nowhere: megabytes of output must not fill a pipe nobody reads.
        server = Server(int(request_fd), int(answer_fd))
        # From here on the learner's code runs: it may write in its working directory only (where
        # the platform has a sandbox), never in the grader's source, the course's notebooks or
        # another notebook's results; it reads only what running a notebook needs, never the
        # hidden tests, a classmate's work or transformers' code, however it hides the attempt;
        # and its environment holds nothing the instructor's shell had beyond Python's settings.
        # matplotlib reads its font cache in the user's home on import: before the sandbox closes
        # it (a template's fork has it imported already), or every import would rebuild it.
        import matplotlib.font_manager  # noqa: F401

        kept = confinement.environment()
        os.environ.clear()
        os.environ.update(kept)
        system.confine(os.getcwd(), confinement.readable(), confinement.unreadable())
    except BaseException as err:  # the grader's own failure: the judge says so, not "your code"
        write_frame(int(answer_fd), f"{type(err).__name__}: {err}".encode()[:2000])
        raise
    write_frame(int(answer_fd), READY.encode())
    server.serve()
