"""Exec a program under a seccomp filter like a container runtime's (for the matrix).

Usage: restricted.py MODE PROGRAM [ARGS...]

MODE "docker": what Docker's default profile does to a process without CAP_SYS_ADMIN:
`unshare`, `setns`, `mount`, `umount2`, `pivot_root` fail with EPERM, `clone` with any
namespace flag fails with EPERM, `clone3` with ENOSYS (the C library falls back to
clone). MODE "no-userns": only new user namespaces fail (`unshare`/`clone` with
CLONE_NEWUSER), as on a kernel with user.max_user_namespaces=0 or Ubuntu's AppArmor
restriction, for an ordinary user (who then cannot make any other namespace either).

x86_64 only; sets no_new_privs (needed to load a filter without CAP_SYS_ADMIN).
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys

NR = {"unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155,
      "clone": 56, "clone3": 435}  # fmt: skip
CLONE_NEWUSER = 0x10000000
CLONE_NAMESPACES = (0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
                    | 0x20000000 | 0x40000000 | 0x00000080)  # fmt: skip
LD, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06
ALLOW, EPERM, ENOSYS = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38


def program(mode: str) -> bytes:
    flags = CLONE_NAMESPACES if mode == "docker" else CLONE_NEWUSER
    plain = ["setns", "mount", "umount2", "pivot_root"] if mode == "docker" else []
    # (code, jt, jf, k) with jt/jf as labels resolved below.
    prog: list[tuple[int, object, object, int]] = [
        (LD, 0, 0, 4), (JEQ, 0, "allow", 0xC000003E), (LD, 0, 0, 0),
        (JEQ, "enosys", 0, NR["clone3"]),
        *[(JEQ, "deny", 0, NR[name]) for name in plain],
    ]
    if mode == "docker":
        prog.append((JEQ, "deny", 0, NR["unshare"]))
        prog.append((JEQ, "flags", "allow", NR["clone"]))
    else:
        prog.append((JEQ, "flags", 0, NR["unshare"]))
        prog.append((JEQ, "flags", "allow", NR["clone"]))
    labels = {"flags": len(prog)}
    prog += [(LD, 0, 0, 16), (JSET, "deny", "allow", flags)]
    labels["allow"] = len(prog)
    prog.append((RET, 0, 0, ALLOW))
    labels["deny"] = len(prog)
    prog.append((RET, 0, 0, EPERM))
    labels["enosys"] = len(prog)
    prog.append((RET, 0, 0, ENOSYS))
    out = b""
    for i, (code, jt, jf, k) in enumerate(prog):
        offsets = [labels[j] - i - 1 if isinstance(j, str) else j for j in (jt, jf)]
        out += struct.pack("=HBBI", code, offsets[0], offsets[1], k)
    return out


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def main() -> None:
    mode, argv = sys.argv[1], sys.argv[2:]
    code = program(mode)
    buf = ctypes.create_string_buffer(code, len(code))
    fprog = SockFprog(len(code) // 8, ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main()
