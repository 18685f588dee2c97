"""Make a Python process lack what macOS lacks, for the portable path's tests.

Put this folder on ``PYTHONPATH`` (with ``BERTLAB_PORTABLE=1``) and every process of a grading
run starts without the Linux-only interfaces the grader once called directly: ``os.pidfd_open``,
and libc's ``prctl`` and ``syscall`` (looked up through ctypes, as macOS's libc has no such
symbols). ``os.fork`` goes too: on macOS a fork after Apple's frameworks have started is
unsafe, so the portable path must start every process with a new interpreter. Whatever still
calls them breaks here as it would on a Mac.
"""

import ctypes
import os

MISSING_IN_LIBC = frozenset({"prctl", "syscall"})

for name in ("pidfd_open", "fork"):
    os.__dict__.pop(name, None)

_lookup_attr = ctypes.CDLL.__getattr__
_lookup_item = ctypes.CDLL.__getitem__


def _without(lookup):
    def lookup_unless_missing(self, name):
        if name in MISSING_IN_LIBC:
            raise AttributeError(f"dlsym(RTLD_DEFAULT, {name}): symbol not found (emulated macOS libc)")
        return lookup(self, name)

    return lookup_unless_missing


# Patched on the class, so every library loaded from here on misses the same symbols.
for _name, _lookup in (("__getattr__", _without(_lookup_attr)), ("__getitem__", _without(_lookup_item))):
    setattr(ctypes.CDLL, _name, _lookup)
