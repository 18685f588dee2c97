"""Keep a learner's process from writing anywhere but its own working directory (Linux Landlock).

The learner's code runs as the same user as the grader, so without this it could rewrite the
grader's own source, the course's notebooks or another run's results, and change a later
verdict. Landlock lets an unprivileged process give up rights for itself and its children:
after ``restrict_writes(folder)`` nothing in the process may create, change, rename or delete a
file outside ``folder`` (and ``/dev``, for ``/dev/null``). Reading stays allowed: the learner's
code imports torch and reads the pretrained weights.

Kernels without Landlock (before 5.13, or with it disabled) leave the process as it was;
``restrict_writes`` then returns False and the honest-grading page's known limits apply.
"""

from __future__ import annotations

import ctypes
import os
import struct
import tempfile

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # syscall numbers, the same on every architecture
_VERSION = 1
_PATH_BENEATH = 1
_NO_NEW_PRIVS = 38
_O_PATH = 0o10000000

WRITE_FILE, REMOVE_DIR, REMOVE_FILE = 1 << 1, 1 << 4, 1 << 5
MAKE = sum(1 << bit for bit in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
REFER, TRUNCATE = 1 << 13, 1 << 14  # ABI 2 and 3


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def abi() -> int:
    """The kernel's Landlock ABI version, 0 when it has none."""
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    version = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION))
    return max(0, version)


def _write_rights(version: int) -> int:
    rights = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE
    if version >= 2:
        rights |= REFER
    if version >= 3:
        rights |= TRUNCATE
    return rights


def restrict_writes(folder: str) -> bool:
    """Allow this process (and what it starts) to write only beneath ``folder`` and ``/dev``."""
    version = abi()
    if version < 1:
        return False
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    rights = _write_rights(version)
    attr = ctypes.create_string_buffer(struct.pack("<Q", rights))
    ruleset = libc.syscall(_CREATE_RULESET, attr, ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        return False
    try:
        for path in (folder, "/dev"):
            fd = os.open(path, _O_PATH | os.O_CLOEXEC)
            try:
                rule = ctypes.create_string_buffer(struct.pack("<Qi", rights, fd))
                if (
                    libc.syscall(
                        _ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_PATH_BENEATH), rule, ctypes.c_uint32(0)
                    )
                    < 0
                ):
                    return False
            finally:
                os.close(fd)
        if libc.prctl(_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        if libc.syscall(_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            return False
    finally:
        os.close(ruleset)
    tempfile.tempdir = folder  # tempfile.mkstemp() and friends write where writing is allowed
    os.environ["TMPDIR"] = folder
    return True
