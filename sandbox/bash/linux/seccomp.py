"""seccomp: the BPF program that denies what Landlock and the namespaces cannot (new
namespaces, sockets of other families, setuid modes, leases, ...)."""

from __future__ import annotations

import ctypes
import errno
import struct
from collections.abc import Mapping

_AUDIT_ARCH_X86_64 = 0xC000003E
_SECCOMP_ARCH = {"x86_64": _AUDIT_ARCH_X86_64}
# x86_64 numbers. Each has no place in a command of a sandbox: debugging other
# processes, mounting, loading kernel code or BPF, kernel keyrings, modules, swap,
# reboot, the clock, new namespaces, raw memory of other processes, file handles that
# bypass path checks, io_uring (its operations bypass seccomp), userfaultfd, perf.
DENIED_SYSCALLS: Mapping[str, int] = {
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
    "pidfd_getfd": 438, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "move_mount": 429, "open_tree": 428,
    "fspick": 433, "mount_setattr": 442, "swapon": 167, "swapoff": 168, "reboot": 169,
    "sethostname": 170, "setdomainname": 171, "iopl": 172, "ioperm": 173,
    "init_module": 175, "delete_module": 176, "finit_module": 313, "kexec_load": 246,
    "kexec_file_load": 320, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
    "open_by_handle_at": 304, "name_to_handle_at": 303, "keyctl": 250, "add_key": 248,
    "request_key": 249, "settimeofday": 164, "clock_settime": 227, "adjtimex": 159,
    "clock_adjtime": 305, "acct": 163, "quotactl": 179, "quotactl_fd": 443,
    "lookup_dcookie": 212, "setns": 308, "unshare": 272, "vhangup": 153, "syslog": 103,
    "uselib": 134, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    # inotify watches any path DAC lets root read, Landlock or not: the names and
    # activity of files outside (another command's TMPDIR). tail -f falls back to polling.
    "inotify_init": 253, "inotify_init1": 294,
    # fanotify's unprivileged mode reports names and events of any file DAC lets root read
    "fanotify_init": 300, "fanotify_mark": 301,
}  # fmt: skip
_SYS_CLONE = 56
_SYS_CLONE3 = 435
_SYS_IOCTL = 16
_SYS_SOCKET = 41
_SYS_SOCKETPAIR = 53
_AF_VSOCK = 40  # to the hypervisor and every VM's vsock ports: outside any network ns
_NETLINK_KOBJECT_UEVENT = 15  # the host's device events
# Calls that can give a file the setuid or setgid bit, by the argument index of the mode.
# A file made setuid in the workspace (or /dev/shm) stays setuid on the host, where
# nosuid does not apply and any local user could run it.
_SYS_MODE_ARG = {90: 1, 91: 1, 85: 1, 2: 2, 268: 2, 452: 2, 257: 3, 133: 1, 259: 2}
# chmod, fchmod, creat, open, fchmodat, fchmodat2, openat, mknod, mknodat (a regular
# file made by mknod S_IFREG|02745 kept setgid through a write and an ACL)
_S_ISUID_ISGID = 0o6000
_SYS_OPENAT2 = 437  # its mode sits in a struct a filter cannot read: ENOSYS, libc falls back
_SYS_FCNTL, _F_SETLEASE = 72, 1024  # a lease on a host file stalls the host's writers
_F_NOTIFY = 1026  # dnotify: inotify's older form
_SOCK_TYPE_MASK, _SOCK_STREAM = 0xF, 1
_AF_UNIX = 1
_AF_INET, _AF_INET6, _AF_PACKET = 2, 10, 17
_AF_NETLINK = 16
_NETLINK_USERSOCK = 2
# clone() flags that create namespaces; clone3 passes its flags in memory that a filter
# cannot read, so it fails with ENOSYS and the C library falls back to clone().
_CLONE_NAMESPACES = (0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
                     | 0x20000000 | 0x40000000 | 0x00000080)  # fmt: skip
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C  # push input into a terminal

_BPF_LD_W_ABS, _BPF_JEQ, _BPF_JGE, _BPF_JSET, _BPF_RET = 0x20, 0x15, 0x35, 0x45, 0x06
_BPF_AND_K = 0x54
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000


def seccomp_program(*, deny_unix_sockets: bool = False, deny_inet_sockets: bool = False
                    ) -> bytes:  # fmt: skip
    """The BPF filter, as struct sock_filter[] bytes (x86_64).

    deny_unix_sockets: `socket(AF_UNIX, ...)` fails too. Landlock does not govern
    `connect` on a pathname unix socket, and a network namespace does not isolate them,
    so without this a root command could talk to any root-owned daemon socket it can
    name (/run/docker.sock). `socketpair` stays allowed for stream pairs only (a
    datagram one can `sendto` any pathname socket). It also makes
    `socket(AF_NETLINK, ..., NETLINK_USERSOCK)` fail: the one netlink protocol on which
    unprivileged processes message each other, and commands of one agent share its
    empty network namespace.
    """
    deny_eperm = _RET_ERRNO | errno.EPERM
    # (code, jt-label, jf-label, k); labels are resolved to relative offsets below.
    prog: list[tuple[int, str | int, str | int, int]] = [
        (_BPF_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (_BPF_JEQ, 0, "deny", _AUDIT_ARCH_X86_64),
        (_BPF_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
        (_BPF_JGE, "deny", 0, 0x40000000),  # the x32 ABI
        (_BPF_JEQ, "clone", 0, _SYS_CLONE),
        (_BPF_JEQ, "ioctl", 0, _SYS_IOCTL),
        (_BPF_JEQ, "enosys", 0, _SYS_CLONE3),
        (_BPF_JEQ, "enosys", 0, _SYS_OPENAT2),
        (_BPF_JEQ, "fcntl", 0, _SYS_FCNTL),
        *[(_BPF_JEQ, f"mode{arg}", 0, nr) for nr, arg in _SYS_MODE_ARG.items()],
    ]
    if deny_unix_sockets or deny_inet_sockets:
        prog.append((_BPF_JEQ, "socket", 0, _SYS_SOCKET))
    if deny_unix_sockets:
        prog.append((_BPF_JEQ, "socketpair", 0, _SYS_SOCKETPAIR))
    prog += [(_BPF_JEQ, "deny", 0, nr) for nr in sorted(DENIED_SYSCALLS.values())]
    prog.append((_BPF_JEQ, "allow", "allow", 0))  # jump over the argument checks
    labels: dict[str, int] = {"clone": len(prog)}
    prog += [
        (_BPF_LD_W_ABS, 0, 0, 16),  # args[0], low half: the flags
        (_BPF_JSET, "deny", "allow", _CLONE_NAMESPACES),
    ]
    labels["ioctl"] = len(prog)
    prog += [
        (_BPF_LD_W_ABS, 0, 0, 24),  # args[1], low half: the request
        (_BPF_JEQ, "deny", 0, _TIOCSTI),
        (_BPF_JEQ, "deny", "allow", _TIOCLINUX),
    ]
    labels["fcntl"] = len(prog)
    prog += [
        (_BPF_LD_W_ABS, 0, 0, 24),  # args[1]: the command
        (_BPF_JEQ, "deny", 0, _F_NOTIFY),
        (_BPF_JEQ, "deny", "allow", _F_SETLEASE),
    ]
    for arg in sorted(set(_SYS_MODE_ARG.values())):
        labels[f"mode{arg}"] = len(prog)
        prog += [
            (_BPF_LD_W_ABS, 0, 0, 16 + 8 * arg),  # the mode argument, low half
            (_BPF_JSET, "deny", "allow", _S_ISUID_ISGID),
        ]
    labels["socket"] = len(prog)
    prog += [(_BPF_LD_W_ABS, 0, 0, 16)]  # args[0]: the address family
    if deny_inet_sockets:
        prog += [(_BPF_JEQ, "deny", 0, family) for family in (_AF_INET, _AF_INET6, _AF_PACKET)]
    prog += [
        (_BPF_JEQ, "deny" if deny_unix_sockets else "allow", 0, _AF_UNIX),
        (_BPF_JEQ, "deny", 0, _AF_VSOCK),
        (_BPF_JEQ, 0, "allow", _AF_NETLINK),
        (_BPF_LD_W_ABS, 0, 0, 32),  # args[2]: the protocol
        (_BPF_JEQ, "deny", 0, _NETLINK_KOBJECT_UEVENT),
        (_BPF_JEQ, "deny", "allow", _NETLINK_USERSOCK),
    ]
    # socketpair(AF_UNIX, SOCK_DGRAM): an unbound datagram socket can sendto() any
    # pathname socket on the host (/dev/log): only stream pairs (pipes) are allowed.
    labels["socketpair"] = len(prog)
    prog += [
        (_BPF_LD_W_ABS, 0, 0, 24),  # args[1], low half: the type and its flags
        (_BPF_AND_K, 0, 0, _SOCK_TYPE_MASK),
        (_BPF_JEQ, "allow", "deny", _SOCK_STREAM),
    ]
    # BPF jumps only forward: the verdicts come last.
    labels["allow"] = len(prog)
    prog.append((_BPF_RET, 0, 0, _RET_ALLOW))
    labels["deny"] = len(prog)
    prog.append((_BPF_RET, 0, 0, deny_eperm))
    labels["enosys"] = len(prog)
    prog.append((_BPF_RET, 0, 0, _RET_ERRNO | errno.ENOSYS))
    out = bytearray()
    for i, (code, jt, jf, k) in enumerate(prog):
        offsets = [labels[j] - i - 1 if isinstance(j, str) else j for j in (jt, jf)]
        out += struct.pack("=HBBI", code, offsets[0], offsets[1], k)
    return bytes(out)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
