"""The system calls the Linux layer makes through libc (ctypes), their numbers on x86-64,
and small readers of this process's state. A leaf of `sandbox.bash.linux`."""

from __future__ import annotations

import ctypes
import os

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int

SYS_landlock_create_ruleset = 444
SYS_landlock_add_rule = 445
SYS_landlock_restrict_self = 446
SYS_capset = 126


def _why(e: BaseException) -> str:
    """An OSError raised as OSError(errno, "the step") as "the step: the error"."""
    if isinstance(e, OSError) and e.errno and e.strerror:
        text = os.strerror(e.errno)
        return e.strerror if e.strerror.endswith(text) else f"{e.strerror}: {text}"
    return str(e)


def _status_field(name: str) -> str | None:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.split(":", 1)[1].strip()
    return None
