"""OS confinement of one command: Landlock, a network namespace, no capabilities, seccomp.

The policy is the first wall; this is the second. It bounds what an allowed program can
do, as if the policy had failed: `cat` may read any file the policy lets it name, but
the kernel lets it open only the workspace, a private temporary directory and the
system's world-readable files.

Three parts, in the order they run:

1. **Detection** (`detect`), once per process: which layers this kernel offers (Landlock
   and its ABI, seccomp filters, network and user namespaces). Setting
   ``SANDBOX_CONFINEMENT_UNAVAILABLE=landlock,seccomp`` (any of `LAYERS`, "landlock" for
   all three Landlock layers, or "all") makes detection report those layers missing:
   the switch tests use to prove that ``confinement="required"`` refuses to run.
2. **Planning** (`plan`), per run, in the agent: what the policy asks for, against what
   the kernel offers, gives a `Confinement` (plain, picklable data: paths, flags, the
   Landlock ABI to target) and a report naming every layer as active or inactive with
   the reason. Under ``"required"`` a missing layer raises `ConfinementUnavailable`.
3. **Preparation and application** (`prepare`), in whichever process forks the child
   (the agent today, a spawner process tomorrow): everything that allocates or can fail
   in a way worth reporting happens *before* the fork: the Landlock ruleset is created
   and filled (its fd is inherited by the child, close-on-exec), the seccomp BPF program
   is assembled into a ctypes buffer, the namespace map lines are encoded. After the
   fork `Prepared.apply` only makes system calls, in this order (each step needs the
   privileges the next one removes):

   a. network namespace: ``unshare(CLONE_NEWNET)`` (an unprivileged agent also needs
      ``CLONE_NEWUSER`` and an identity uid/gid map); for network="loopback" the
      namespace's own ``lo`` is brought up;
   b. the capability bounding set is emptied (needs CAP_SETPCAP, still held);
   c. (the caller drops to another uid here, if it does: needs CAP_SETUID, still held)
   d. effective, permitted, inheritable and ambient capabilities are cleared;
   e. ``PR_SET_NO_NEW_PRIVS``: setuid binaries and file capabilities grant nothing;
   f. ``landlock_restrict_self``: filesystem, TCP and scope rules;
   g. the seccomp filter, last, because it denies ``unshare`` which step a used.

ctypes rather than a PyPI package: `landlock` (1.0.0.dev5) is a pre-release that builds
its ruleset in the calling process, so it would run after the fork; `pyseccomp` wraps
libseccomp, a C library that must be installed and that allocates while loading a
filter. Three Landlock syscalls and one BPF program of 60 instructions are short
enough to own, and let all allocation happen before the fork.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import dataclasses
import errno
import fcntl
import mmap
import os
import platform
import select
import socket
import stat
import struct
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.bash.linux import protected as _protected
from sandbox.errors import ConfigurationError

__all__ = [
    "CONFINEMENT_MODES",
    "FILESYSTEM_MODES",
    "LAYERS",
    "NETWORK_MODES",
    "UNAVAILABLE_ENV",
    "Confinement",
    "ConfinementRequest",
    "ConfinementUnavailable",
    "KernelSupport",
    "Prepared",
    "detect",
    "plan",
    "prepare",
]

FILESYSTEM_MODES = ("read-write", "read-only")
NETWORK_MODES = ("none", "loopback", "allowlist", "host")
CONFINEMENT_MODES = ("best-effort", "required", "none")
LAYERS = (
    "landlock-fs",
    "landlock-net",
    "landlock-scopes",
    "seccomp",
    "capabilities",
    "no-new-privs",
    "netns",
    "private-proc",
)
UNAVAILABLE_ENV = "SANDBOX_CONFINEMENT_UNAVAILABLE"

# System directories a command may read and execute. /etc is handled separately (only
# its world-readable files). Missing ones are skipped.
SYSTEM_READ_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
                     "/proc", "/sys/devices/system/cpu")  # fmt: skip
# Devices a command may read and write (not ioctl).
DEVICE_PATHS = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
ETC = "/etc"
_ETC_MAX_RULES = 2000


class ConfinementUnavailable(ConfigurationError):
    """confinement="required" and the kernel lacks a layer the policy asks for."""


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class ConfinementRequest:
    """What a policy asks of the OS (see BashToolPolicy's fields of the same names).

    filesystem: "read-write" (the workspace is writable) or "read-only".
    readable_paths: more directories or files the command may read and execute.
    writable_paths: more directories or files the command may read, write and create in.
    network: "none" (an empty network namespace, and no TCP bind/connect at all),
    "loopback" (a private network namespace whose own 127.0.0.1 is up: the command can
    talk to servers it starts itself, never to the host's listeners) or "host".
    mode: "best-effort" (run with what the kernel offers; report the rest),
    "required" (refuse to run when a layer is missing) or "none" (no OS confinement).
    protected_paths: paths inside a writable workspace no command may change (resolved
    entries, see `sandbox.bash.linux.protected`); protected: their scan for one run (the
    process layer attaches it before planning; None: nothing attached).
    """

    filesystem: str = "read-write"
    readable_paths: tuple[str, ...] = ()
    writable_paths: tuple[str, ...] = ()
    network: str = "none"
    mode: str = "best-effort"
    protected_paths: tuple[str, ...] = _protected.DEFAULT_PROTECTED_PATHS
    protected: _protected.ProtectedPaths | None = None

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("filesystem", self.filesystem, FILESYSTEM_MODES),
            ("network", self.network, NETWORK_MODES),
            ("confinement", self.mode, CONFINEMENT_MODES),
        ):
            if value not in allowed:
                raise ConfigurationError(
                    f"{name}={value!r} is invalid: use one of "
                    + ", ".join(repr(a) for a in allowed)
                )
        for name in ("readable_paths", "writable_paths"):
            for p in getattr(self, name):
                if not isinstance(p, str) or not os.path.isabs(p):
                    raise ConfigurationError(
                        f"{name} entry {p!r} is invalid: write an absolute path such as "
                        "'/opt/tools'"
                    )


@dataclass(frozen=True)
class Confinement:
    """The confinement of one run, as plain data (picklable: a spawner receives it).

    read_paths get read+execute, write_paths every filesystem right, device_paths read
    and write. private_paths are write paths of this run only (its TMPDIR): the rest is
    the same from run to run, so the process that forks keeps it ready (see
    `prepare`). landlock_abi is the ABI to target (0: no Landlock). euid/egid are the
    forking process's, for the identity map of a new user namespace. private_proc: the
    command is the first process of a PID namespace of its own (the forking process
    arranges that, see `pid_namespace`) and gets a mount namespace with a fresh /proc,
    which lists its own processes only. hide_etc_secrets (with private_proc): every
    entry of /etc that is not world-readable (/etc/shadow, /etc/ssl/private, ...) is
    covered, in that mount namespace, by an empty placeholder nobody may read, so that
    read_paths can grant /etc whole.
    """

    read_paths: tuple[str, ...] = ()
    write_paths: tuple[str, ...] = ()
    private_paths: tuple[str, ...] = ()
    device_paths: tuple[str, ...] = ()
    landlock_abi: int = 0
    landlock_fs: bool = False
    landlock_net: bool = False
    landlock_scopes: bool = False
    seccomp: bool = False
    deny_unix_sockets: bool = False
    # IPv4, IPv6 and packet sockets fail (seccomp): network != "host" without a network
    # namespace, where Landlock would stop TCP only (UDP to the host's ports got through).
    deny_inet_sockets: bool = False
    drop_capabilities: bool = True
    no_new_privs: bool = True
    new_netns: bool = False
    loopback_up: bool = False
    # network="allowlist": once lo is up, listen on these 127.0.0.1 ports inside the
    # namespace and hand the listeners to the agent's egress proxy over proxy_channel
    # (a descriptor the child inherits; see sandbox/bash/network/handover.py).
    proxy_ports: tuple[int, ...] = ()
    proxy_channel: int = -1
    new_userns: bool = False
    private_proc: bool = False
    hide_etc_secrets: bool = False
    euid: int = 0
    egid: int = 0
    # Protected paths inside the workspace, mounted read-only in the command's mount
    # namespace: private_proc's, or (protected_mount_ns) one made for them alone, in a
    # user namespace when unprivileged. Without either they are Landlock rules instead.
    protected: _protected.ProtectedPaths | None = None
    protected_mount_ns: bool = False


# --------------------------------------------------------------------------- detection


@dataclass(frozen=True)
class KernelSupport:
    """What this kernel offers, each layer with the reason when it does not."""

    landlock_abi: int
    missing: Mapping[str, str] = field(default_factory=dict)
    root: bool = False

    def has(self, layer: str) -> bool:
        return layer not in self.missing


_detected: KernelSupport | None = None
_detect_lock = threading.Lock()


def _forget_the_parents_locks() -> None:
    """In a child forked while another thread held one of these (its first command's
    probes): the child would wait for it forever."""
    global _detect_lock, _rules_lock, _ns_lock
    _detect_lock = threading.Lock()
    _rules_lock = threading.Lock()
    _ns_lock = threading.Lock()
    _shared_fds._lock = threading.Lock()
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int

SYS_landlock_create_ruleset = 444
SYS_landlock_add_rule = 445
SYS_landlock_restrict_self = 446
SYS_capset = 126
LANDLOCK_CREATE_RULESET_VERSION = 1


def _landlock_abi() -> tuple[int, str]:
    abi = _libc.syscall(
        ctypes.c_long(SYS_landlock_create_ruleset), None, ctypes.c_size_t(0),
        ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION),
    )
    if abi < 0:
        err = ctypes.get_errno()
        why = {
            errno.ENOSYS: "the kernel has no Landlock (Linux 5.13+ built with "
            "CONFIG_SECURITY_LANDLOCK)",
            errno.EOPNOTSUPP: "Landlock is built in but disabled (add landlock to the "
            "kernel's lsm= boot parameter)",
        }.get(err, f"landlock_create_ruleset failed: {os.strerror(err)}")
        return 0, why
    return int(abi), ""


def _why(e: BaseException) -> str:
    """An OSError raised as OSError(errno, "the step") as "the step: the error"."""
    if isinstance(e, OSError) and e.errno and e.strerror:
        text = os.strerror(e.errno)
        return e.strerror if e.strerror.endswith(text) else f"{e.strerror}: {text}"
    return str(e)


def _probe(fn_name: str, confinement: Confinement) -> str:
    """Run /bin/true with `confinement` applied; '' if it worked, else why not."""
    true = "/bin/true" if os.path.exists("/bin/true") else "/usr/bin/true"
    try:
        prepared = prepare(confinement)
    except OSError as e:
        return f"{fn_name}: {e.strerror or e}"
    # The reason, from the child (CPython reports any preexec_fn failure as
    # "Exception occurred in preexec_fn.").
    why_r, why_w = os.pipe2(os.O_CLOEXEC)

    def apply() -> None:
        try:
            prepared.apply()
        except OSError as e:
            os.write(why_w, _why(e).encode()[:2000])
            raise

    try:
        done = subprocess.run(
            [true], preexec_fn=apply, stdin=subprocess.DEVNULL,
            capture_output=True, timeout=10, check=False,
        )
    except subprocess.SubprocessError as e:
        os.close(why_w)
        why = os.read(why_r, 2000).decode("utf-8", "replace")
        return f"{fn_name}: {why}" if why else f"{fn_name} failed in a test child: {e}"
    except OSError as e:
        return f"{fn_name} failed in a test child: {e.strerror or e}"
    finally:
        prepared.close()
        with contextlib.suppress(OSError):
            os.close(why_w)
        os.close(why_r)
    if done.returncode != 0:
        return f"{fn_name}: a test child exited with status {done.returncode}"
    return ""


def _probe_private_proc(c: Confinement) -> str:
    """'' if a child can be the first process of a PID namespace of its own, with a
    fresh /proc in its own mount namespace, forked the way the spawner forks one
    (`fork_in_pid_namespace`); else why not. Tried in a throwaway child of ours, so
    that this process never becomes a subreaper nor forks into a namespace."""
    what = "PID and mount namespaces with a private /proc"
    try:
        prepared = prepare(c)
    except OSError as e:
        return f"{what}: {e.strerror or e}"
    report_r, report_w = os.pipe2(os.O_CLOEXEC)
    try:
        pid = os.fork()
    except OSError as e:
        os.close(report_r)
        os.close(report_w)
        prepared.close()
        return f"{what}: fork: {e.strerror or e}"
    if pid == 0:  # the throwaway child: leaves only through os._exit
        status = 1
        try:
            os.close(report_r)
            first = fork_in_pid_namespace(c)
            if first == 0:
                try:
                    prepared.apply()
                    with open("/proc/self/stat", "rb") as f:
                        if f.read().split()[0] != b"1":
                            raise OSError(errno.EINVAL, "/proc is not the namespace's own")
                    os._exit(0)
                except BaseException as e:
                    with contextlib.suppress(BaseException):
                        os.write(report_w, _why(e).encode()[:2000])
                    os._exit(1)
            _, wait_status = os.waitpid(first, 0)
            status = 0 if wait_status == 0 else 1
        except BaseException as e:
            with contextlib.suppress(BaseException):
                os.write(report_w, _why(e).encode()[:2000])
        os._exit(status)
    os.close(report_w)
    prepared.close()
    try:
        said = b""
        while chunk := os.read(report_r, 4096):
            said += chunk
    finally:
        os.close(report_r)
    _, wait_status = os.waitpid(pid, 0)
    if wait_status == 0:
        return ""
    return f"{what}: {said.decode('utf-8', 'replace') or 'a test child failed'}"


def detect() -> KernelSupport:
    """Probe (once per process, then cached) which confinement layers work here."""
    global _detected
    with _detect_lock:
        if _detected is not None:
            return _detected
        root = os.geteuid() == 0
        missing: dict[str, str] = {}
        abi, why = _landlock_abi()
        if abi == 0:
            for layer in ("landlock-fs", "landlock-net", "landlock-scopes"):
                missing[layer] = why
        else:
            if abi < 4:
                missing["landlock-net"] = f"Landlock ABI {abi} < 4 (needs Linux 6.7)"
            if abi < 6:
                missing["landlock-scopes"] = f"Landlock ABI {abi} < 6 (needs Linux 6.12)"
        if _SECCOMP_ARCH.get(platform.machine()) is None:
            missing["seccomp"] = (
                f"no syscall table for {platform.machine()} (only x86_64 is built in)"
            )
        else:
            seccomp_line = _status_field("Seccomp")
            if seccomp_line is None:
                missing["seccomp"] = "the kernel has no seccomp (CONFIG_SECCOMP)"
            else:
                problem = _probe("seccomp", Confinement(seccomp=True, drop_capabilities=False))
                if problem:
                    missing["seccomp"] = problem
        admin = namespace_admin()
        netns = Confinement(new_netns=True, new_userns=not admin, euid=os.geteuid(),
                            egid=os.getegid(), drop_capabilities=False)  # fmt: skip
        problem = _probe("network namespace", netns)
        if problem:
            missing["netns"] = problem + (
                "" if admin else " (without CAP_SYS_ADMIN a network namespace needs a user "
                "namespace: sysctl kernel.unprivileged_userns_clone=1 / "
                "user.max_user_namespaces, or a container runtime that allows them)"
            )
        problem = _probe_private_proc(Confinement(
            private_proc=True, new_userns=not admin, drop_capabilities=False,
            euid=os.geteuid(), egid=os.getegid()))  # fmt: skip
        if problem:
            missing["private-proc"] = problem + (
                "" if admin else " (without CAP_SYS_ADMIN a PID namespace needs a user "
                "namespace)"
            )
        if abi:
            problem = _probe("landlock", Confinement(landlock_abi=abi, landlock_fs=True,
                                                     read_paths=("/",)))  # fmt: skip
            if problem:
                for layer in ("landlock-fs", "landlock-net", "landlock-scopes"):
                    missing.setdefault(layer, problem)
        simulated = {s.strip() for s in os.environ.get(UNAVAILABLE_ENV, "").split(",")}
        simulated.discard("")
        if "landlock" in simulated:
            simulated |= {"landlock-fs", "landlock-net", "landlock-scopes"}
        if "all" in simulated:
            simulated |= set(LAYERS)
        for layer in sorted(simulated & set(LAYERS)):
            missing[layer] = f"simulated: {UNAVAILABLE_ENV} names {layer}"
        if {"landlock-fs", "landlock-net", "landlock-scopes"} <= set(missing):
            abi = 0
        _detected = KernelSupport(landlock_abi=abi, missing=missing, root=root)
        return _detected


def _reset_detection_for_tests() -> None:
    global _detected
    with _detect_lock:
        _detected = None


def _status_field(name: str) -> str | None:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.split(":", 1)[1].strip()
    return None


# --------------------------------------------------------------------------- planning


def plan(
    request: ConfinementRequest,
    *,
    workspace: str,
    tmpdir: str | None,
    drops_to_uid: bool = False,
) -> tuple[Confinement | None, dict[str, str]]:
    """The confinement of one run and the report of every layer ("active: ..." or
    "inactive: <reason>"); the report's "missing" entry, present only when some layer
    the request needs is lacking (under "best-effort"), names each with the reason.

    Raises ConfinementUnavailable under mode="required" when a layer the request needs
    is missing, naming each missing layer and why.
    """
    if request.mode == "none":
        return None, {layer: "inactive: confinement='none' in the policy" for layer in LAYERS}
    kernel = detect()
    root = os.geteuid() == 0
    # Without CAP_SYS_ADMIN (an ordinary user; root in Docker), each command's
    # namespaces are made inside a user namespace of its own, mapping our uid to itself.
    # So too for root of a rootless container (unless it drops to another uid, which
    # that map lacks): RLIMIT_NPROC then counts the command's processes only (it counts
    # per user namespace and uid since Linux 5.14).
    admin = namespace_admin()
    needed = ["landlock-fs", "landlock-scopes", "seccomp", "capabilities", "no-new-privs",
              "private-proc"]  # fmt: skip
    if request.network != "host":
        needed += ["netns"]
    if request.network == "none":
        needed += ["landlock-net"]
    missing = {layer: kernel.missing[layer] for layer in needed if not kernel.has(layer)}
    if request.mode == "required" and missing:
        raise ConfinementUnavailable(
            "confinement='required' but this machine lacks: "
            + "; ".join(f"{layer} ({why})" for layer, why in missing.items())
            + ". Run `sandbox doctor` for details; use confinement='best-effort' to run "
            "with what the kernel offers"
        )
    abi = kernel.landlock_abi
    ws_rights = "read-write" if request.filesystem == "read-write" else "read-only"
    private_proc = kernel.has("private-proc")
    # With a private /proc, the child grants it once mounted (a rule names an inode).
    system = [p for p in SYSTEM_READ_PATHS if not (private_proc and p == "/proc")]
    # In a mount namespace of its own, /etc is granted whole and its entries that are
    # not world-readable are covered (`etc_secrets`): one Landlock rule instead of ~160.
    hide_etc = private_proc and kernel.has("landlock-fs")
    etc = [ETC] if hide_etc else list(_etc_rules())
    read_paths = [*system, *etc, *request.readable_paths]
    write_paths = [*request.writable_paths]
    (write_paths if ws_rights == "read-write" else read_paths).append(workspace)
    use_netns = request.network != "host" and kernel.has("netns")
    # Without a namespace of its own, "loopback" would be the host's: deny TCP instead.
    # Without a namespace of its own, "loopback" would be the host's and "allowlist"
    # would have no proxy inside: deny TCP instead.
    landlock_net = kernel.has("landlock-net") and (
        request.network == "none"
        or (request.network in ("loopback", "allowlist") and not use_netns)
    )
    confinement = Confinement(
        read_paths=tuple(read_paths),
        write_paths=tuple(write_paths),
        private_paths=(tmpdir,) if tmpdir is not None else (),
        device_paths=DEVICE_PATHS,
        landlock_abi=abi,
        landlock_fs=kernel.has("landlock-fs"),
        landlock_net=landlock_net,
        landlock_scopes=kernel.has("landlock-scopes"),
        seccomp=kernel.has("seccomp"),
        deny_unix_sockets=request.network != "host",
        deny_inet_sockets=request.network != "host" and not use_netns,
        drop_capabilities=kernel.has("capabilities"),
        no_new_privs=kernel.has("no-new-privs"),
        new_netns=use_netns,
        loopback_up=use_netns and request.network in ("loopback", "allowlist"),
        new_userns=(use_netns or private_proc) and (
            not admin or (not _can_setns_back() and not drops_to_uid)),
        private_proc=private_proc,
        hide_etc_secrets=hide_etc,
        euid=os.geteuid(),
        egid=os.getegid(),
    )
    report: dict[str, str] = {}

    def say(layer: str, active: bool, what: str) -> None:
        report[layer] = f"active: {what}" if active else f"inactive: {what}"

    if confinement.landlock_fs:
        absent = [p for p in (*request.readable_paths, *request.writable_paths)
                  if not os.path.exists(p)]  # fmt: skip
        note = f"; not found, so not granted: {', '.join(absent)}" if absent else ""
        say("landlock-fs", True, f"ABI {abi}; workspace {ws_rights}, private TMPDIR "
            f"read-write, system directories read-only, nothing else{note}")  # fmt: skip
    else:
        say("landlock-fs", False, kernel.missing["landlock-fs"])
    if request.network == "host":
        say("landlock-net", False, "network='host' in the policy")
    elif landlock_net:
        say("landlock-net", True, f"ABI {abi}; TCP bind and connect denied")
    elif request.network in ("loopback", "allowlist"):
        say("landlock-net", False, f"not needed: network='{request.network}' uses a "
            "private network namespace")  # fmt: skip
    else:
        say("landlock-net", False, kernel.missing.get("landlock-net", "not requested"))
    if confinement.landlock_scopes:
        say("landlock-scopes", True, f"ABI {abi}; no signals to, or abstract unix sockets "
            "of, processes outside the command")  # fmt: skip
    else:
        say("landlock-scopes", False, kernel.missing["landlock-scopes"])
    if confinement.seccomp:
        unix = (", unix sockets (socketpair excepted) and NETLINK_USERSOCK"
                if confinement.deny_unix_sockets else "")  # fmt: skip
        say("seccomp", True, f"{len(DENIED_SYSCALLS)} syscalls (ptrace, mount, bpf, "
            f"kexec, keyctl, modules, namespaces, clock, ...){unix} fail with EPERM")  # fmt: skip
    else:
        say("seccomp", False, kernel.missing["seccomp"])
    if not confinement.drop_capabilities:
        say("capabilities", False, kernel.missing["capabilities"])
    elif root or confinement.new_userns:
        say("capabilities", True, "every capability dropped, bounding and ambient sets "
            "included")  # fmt: skip
    else:
        say("capabilities", True, "unprivileged uid: none held; the bounding set stays "
            "(no_new_privs stops setuid and file capabilities)")  # fmt: skip
    if confinement.no_new_privs:
        say("no-new-privs", True, "set")
    elif confinement.landlock_fs or confinement.seccomp:
        say("no-new-privs", True, "set anyway: Landlock and seccomp need it")
    else:
        say("no-new-privs", False, kernel.missing["no-new-privs"])
    if request.network == "host":
        say("netns", False, "network='host' in the policy")
    elif use_netns:
        what = ("private, lo up" if request.network == "loopback"
                else "private, lo up, only the egress proxy's ports 3128 (HTTP) and 1080 "
                "(SOCKS5) listening: names are checked against allowed_domains"
                if request.network == "allowlist"
                else "empty (lo down)" + (", shared by the commands of this agent"
                                          if _shared_netns(confinement) else ""))  # fmt: skip
        say("netns", True, what + (" in a user namespace of its own"
                                   if confinement.new_userns else ""))  # fmt: skip
    else:
        say("netns", False, kernel.missing["netns"] + (
            "; instead, IPv4, IPv6 and packet sockets fail (seccomp)"
            if confinement.seccomp and confinement.deny_inet_sockets else ""))
    if private_proc:
        say("private-proc", True, "own PID, mount and IPC namespaces" + (
            " in a user namespace of its own" if confinement.new_userns else "") + ", fresh /proc: no "
            "process outside the command's tree is visible, and the tree dies with its "
            "first process")  # fmt: skip
    else:
        say("private-proc", False, kernel.missing["private-proc"])
    if drops_to_uid:
        report["identity"] = "active: runs as an unprivileged uid"
    if missing:
        report["missing"] = "; ".join(f"{layer} ({why})" for layer, why in missing.items())
    confinement = _protected.plan_layer(  # sandbox/bash/linux/protected.py
        confinement, report, protected=request.protected, filesystem=request.filesystem,
        mode=request.mode, own_mounts=private_proc, root=root)  # fmt: skip
    return confinement, report


def _etc_rules() -> tuple[str, ...]:
    """The parts of /etc whose whole content every user may read (cached).

    A root command without capabilities still owns root's files: /etc/shadow (0640)
    would be readable by its owner. Landlock grants rights to whole hierarchies, so /etc
    is granted piece by piece: a world-readable file, or a directory whose every file
    and subdirectory is world-readable; otherwise that directory's entries, recursively.
    """
    global _etc_cache
    if _etc_cache is None:
        rules: list[str] = [ETC + "/"]
        _world_readable_parts(ETC, rules, depth=0)
        _etc_cache = tuple(rules[:_ETC_MAX_RULES])
    return _etc_cache


_etc_cache: tuple[str, ...] | None = None


def _world_readable(st: os.stat_result) -> bool:
    need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(st.st_mode) else 0)
    return st.st_mode & need == need


def _subtree_world_readable(path: str) -> bool:
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            try:
                st = os.stat(os.path.join(top, name))
            except OSError:
                continue
            if not _world_readable(st):
                return False
    return True


def _world_readable_parts(path: str, rules: list[str], depth: int) -> None:
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return
    for name in names:
        full = os.path.join(path, name)
        try:
            st = os.stat(full)
        except OSError:
            continue
        if not _world_readable(st):
            continue
        if not stat.S_ISDIR(st.st_mode) or _subtree_world_readable(full):
            rules.append(full)
        elif depth < 4:
            rules.append(full + "/")  # the directory itself: list it, read nothing below
            _world_readable_parts(full, rules, depth + 1)


class _EtcSecrets:
    """The entries of /etc that are not world-readable, kept current with inotify.

    A root command without capabilities still owns root's files, so /etc/shadow (0640)
    would be readable by it. In the command's own mount namespace each such entry is
    covered by an empty placeholder (mode 000, owned by nobody, on a read-only bind
    mount: not even its owner can change it). The list is scanned once and again
    whenever inotify reports a change under /etc (an entry created, removed, renamed or
    chmod'ed); if inotify is unavailable, on every use.
    """

    _MASK = 0x4 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800  # attrib, moves, create..
    _MAX = 4096

    def __init__(self) -> None:
        self._entries: list[tuple[bytes, bool]] | None = None
        self.generation = 0  # bumped by every scan
        # The same, in memory shared with the children forked from here (a zygote
        # compares it with the generation it was prepared with).
        self._shared = mmap.mmap(-1, 8)
        self._inotify = -1
        self.placeholders: tuple[bytes, bytes, bytes] | None = None  # root, file, dir

    def entries(self) -> list[tuple[bytes, bool]]:
        """(path, is_directory) of every entry to cover."""
        if self._entries is not None and not self._changed():
            return self._entries
        if self._inotify >= 0:
            os.close(self._inotify)
        self._inotify = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        found: list[tuple[bytes, bool]] = []
        stack = [ETC]
        while stack:
            top = stack.pop()
            # The watch before the listing: an entry made in between is an event.
            if self._inotify >= 0 and _libc.inotify_add_watch(
                    self._inotify, os.fsencode(top), self._MASK) < 0:  # fmt: skip
                os.close(self._inotify)  # out of watches: scan on every use
                self._inotify = -1
            try:
                names = os.listdir(top)
            except OSError:
                continue
            for name in names:
                full = os.path.join(top, name)
                try:
                    st = os.lstat(full)
                except OSError:
                    continue
                if stat.S_ISLNK(st.st_mode):
                    continue  # its target is checked where it lies
                if not _world_readable(st):
                    found.append((os.fsencode(full), stat.S_ISDIR(st.st_mode)))
                elif stat.S_ISDIR(st.st_mode):
                    stack.append(full)
        if len(found) > self._MAX:
            raise OSError(errno.E2BIG, f"{len(found)} entries of /etc are not world-readable "
                          f"(more than {self._MAX} to cover)")  # fmt: skip
        self._entries = found
        self.generation += 1
        self._shared[:8] = struct.pack("=Q", self.generation)
        return found

    @property
    def watch_fd(self) -> int:
        """The inotify descriptor (-1 without one)."""
        return self._inotify

    def stale_since(self, generation: int) -> bool:
        """In a forked child: whether /etc changed since `generation` was current in
        the process it was forked from (events queued, or a later scan there). Reads
        nothing off the queue."""
        if self._inotify < 0:
            return True
        # The queue first, then the generation: the forking process bumps the
        # generation before it empties the queue, so one of the two shows a change.
        pending = array.array("i", [0])
        fcntl.ioctl(self._inotify, _FIONREAD, pending, True)
        if pending[0] > 0:
            return True
        current: int = struct.unpack("=Q", self._shared[:8])[0]
        return current != generation

    def _changed(self) -> bool:
        if self._inotify < 0:
            return True
        pending = array.array("i", [0])
        fcntl.ioctl(self._inotify, _FIONREAD, pending, True)
        if pending[0] <= 0:
            return False
        # Mark every zygote prepared from the old list stale *before* emptying the
        # queue: a zygote checks the queue, then the generation, and between the two
        # (or during the rescan) it must not see an empty queue and an old generation.
        self.generation += 1
        self._shared[:8] = struct.pack("=Q", self.generation)
        changed = False
        while True:
            try:
                if not os.read(self._inotify, 65536):
                    return changed
            except BlockingIOError:
                return changed
            changed = True

    def placeholder_paths(self) -> tuple[bytes, bytes, bytes]:
        """An empty file and an empty directory, mode 000, owned by nobody (made once
        per process, removed at its exit)."""
        if self.placeholders is None or not os.path.isdir(self.placeholders[0]):
            import atexit
            import shutil
            import tempfile

            _remove_stale_placeholders(tempfile.gettempdir())
            root = tempfile.mkdtemp(prefix=f"sandbox-hidden-{os.getpid()}-")
            os.chmod(root, 0o755)
            file, directory = os.path.join(root, "file"), os.path.join(root, "dir")
            os.close(os.open(file, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0))
            os.mkdir(directory, 0)
            for path in (file, directory):
                os.chmod(path, 0)
                if os.geteuid() == 0:
                    # Not in a user namespace that does not map nobody (a rootless
                    # container): then ours, which the read-only mount keeps at 000.
                    with contextlib.suppress(OSError):
                        os.chown(path, 65534, 65534)
            atexit.register(shutil.rmtree, root, ignore_errors=True)
            self.placeholders = (os.fsencode(root), os.fsencode(file), os.fsencode(directory))
        return self.placeholders


def _remove_stale_placeholders(tmp: str) -> None:
    """Placeholder directories of spawners that are gone (removed at exit, but not
    after a SIGKILL): named after their pid."""
    import shutil

    try:
        names = os.listdir(tmp)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) != 4 or parts[:2] != ["sandbox", "hidden"] or not parts[2].isdigit():
            continue
        pid = int(parts[2])
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
            continue  # alive (or another process now has its pid: left alone)
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)


_etc_secrets = _EtcSecrets()
_FIONREAD = 0x541B


# --------------------------------------------------------------------------- Landlock

_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_REFER = 1 << 13
_FS_TRUNCATE = 1 << 14
_FS_IOCTL_DEV = 1 << 15
_NET_BIND_TCP = 1 << 0
_NET_CONNECT_TCP = 1 << 1
_SCOPE_ABSTRACT_UNIX = 1 << 0
_SCOPE_SIGNAL = 1 << 1
_RULE_PATH_BENEATH = 1
# The rights that make sense on a file (not a directory).
_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV


def _fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1  # ABI 1: execute .. make_sym
    if abi >= 2:
        rights |= _FS_REFER
    if abi >= 3:
        rights |= _FS_TRUNCATE
    if abi >= 5:
        rights |= _FS_IOCTL_DEV
    return rights


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _ruleset_attr(c: Confinement) -> tuple[bytes, int]:
    """struct landlock_ruleset_attr for `c`, and the filesystem rights it handles."""
    handled_fs = _fs_rights(c.landlock_abi) if c.landlock_fs else 0
    handled_net = (_NET_BIND_TCP | _NET_CONNECT_TCP) if c.landlock_net else 0
    scoped = (_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL) if c.landlock_scopes else 0
    if c.landlock_abi >= 6:
        attr = struct.pack("=QQQ", handled_fs, handled_net, scoped)
    elif c.landlock_abi >= 4:
        attr = struct.pack("=QQ", handled_fs, handled_net)
    else:
        attr = struct.pack("=Q", handled_fs)
    return attr, handled_fs


def _read_rights() -> int:
    return _FS_READ_FILE | _FS_READ_DIR | _FS_EXECUTE


class _Rules:
    """The part of a Landlock ruleset that is the same from run to run, kept ready.

    Opening and checking each path is most of the cost of a ruleset: here each path is
    opened once (O_PATH, close-on-exec), and each run only adds the prepared rules to a
    new ruleset (one system call each), plus its own private paths. A rule names an
    inode, not a path, so a path replaced since (a new /etc/passwd written by rename, a
    workspace deleted and made again) would be granted stale: `fresh` stats every path
    again and compares its device and inode with the open one's (which cannot have
    been reused: the fd keeps the old inode allocated), and the rules are rebuilt when
    one differs.
    """

    def __init__(self, c: Confinement) -> None:
        self.attr, handled_fs = _ruleset_attr(c)
        self.handled_fs = handled_fs
        self.rules: list[_PathBeneath] = []
        self._fds: list[int] = []  # ours: the workspace and the policy's extra paths
        self._shared: list[int] = []  # the system's, shared by every rule set
        self._stamps: list[tuple[str, tuple[int, int]]] = []
        self._absent: list[str] = []  # granted once they exist: the rules are rebuilt
        if handled_fs:
            device = _FS_READ_FILE | _FS_WRITE_FILE | (_FS_TRUNCATE & handled_fs)
            try:
                for paths, rights in (
                    (c.read_paths, _read_rights()),
                    (c.write_paths, handled_fs),
                    (c.device_paths, device),
                ):
                    for path in paths:
                        listing_only = path.endswith("/") and len(path) > 1
                        path = path.rstrip("/") if listing_only else path
                        wanted = _FS_READ_DIR if listing_only else rights
                        shared = _shared_path(path)
                        if shared:
                            opened = _shared_fds.take(path, wanted)
                        else:
                            opened = _open_rule(path, wanted)
                        if opened is None:
                            self._absent.append(path)
                        if opened is not None:
                            (self._shared if shared else self._fds).append(opened[0])
                            self.rules.append(_PathBeneath(opened[1], opened[0]))
                            st = os.fstat(opened[0])
                            self._stamps.append((path, (st.st_dev, st.st_ino)))
            except BaseException:
                self.close()
                raise

    def fresh(self) -> bool:
        if any(os.path.exists(path) for path in self._absent):
            return False
        for path, stamp in self._stamps:
            try:
                st = os.stat(path)
            except OSError:
                return False
            if (st.st_dev, st.st_ino) != stamp:
                return False
        return True

    def ruleset(self, private_paths: tuple[str, ...]) -> int:
        """A new ruleset with every prepared rule and `private_paths` read-write."""
        buf = ctypes.create_string_buffer(self.attr, len(self.attr))
        fd = _libc.syscall(ctypes.c_long(SYS_landlock_create_ruleset), buf,
                           ctypes.c_size_t(len(self.attr)), ctypes.c_uint32(0))  # fmt: skip
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_create_ruleset: {os.strerror(err)}")
        try:
            add = _libc.syscall
            for rule in self.rules:
                if add(_SYS_ADD_RULE, fd, _RULE_PATH_BENEATH_C, ctypes.byref(rule), _ZERO) < 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"landlock_add_rule: {os.strerror(err)}")
            if self.handled_fs:
                for path in private_paths:
                    _add_path_rule(fd, path, self.handled_fs)
        except BaseException:
            os.close(fd)
            raise
        return int(fd)

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()
        for fd in self._shared:
            _shared_fds.release(fd)
        self._shared.clear()
        self.rules.clear()


def _shared_path(path: str) -> bool:
    """A path every rule set grants alike: the system's directories, devices and /etc."""
    return (path in SYSTEM_READ_PATHS or path in DEVICE_PATHS or path == ETC
            or path.startswith(ETC + "/"))  # fmt: skip


class _SharedFds:
    """The O_PATH descriptors of the system paths, opened once per process and shared
    by every cached rule set: per workspace only its own paths are opened. Without this
    an agent with several workspaces held ~180 descriptors per workspace when /etc is
    granted piece by piece (no private /proc), and the sixth workspace hit the default
    limit of 1024 open files. A path replaced since (its device and inode differ) gets
    a new descriptor; the old one is closed once no rule set uses it."""

    def __init__(self) -> None:
        self._current: dict[str, tuple[int, int]] = {}  # path -> (fd, rights)
        self._refs: dict[int, int] = {}
        self._superseded: set[int] = set()
        self._lock = threading.Lock()

    def take(self, path: str, rights: int) -> tuple[int, int] | None:
        with self._lock:
            known = self._current.get(path)
            if known is not None:
                fd = known[0]
                try:
                    st, now = os.fstat(fd), os.stat(path)
                    same = (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino)
                except OSError:
                    same = False
                if not same:
                    del self._current[path]
                    self._superseded.add(fd)
                    self._close_if_unused(fd)
                    known = None
            if known is None:
                opened = _open_rule(path, _read_rights() | _FS_WRITE_FILE | _FS_TRUNCATE)
                if opened is None:
                    return None
                known = self._current[path] = opened
            fd = known[0]
            self._refs[fd] = self._refs.get(fd, 0) + 1
            try:
                is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
            except OSError:
                is_dir = False
            return fd, rights if is_dir else rights & _FILE_RIGHTS

    def release(self, fd: int) -> None:
        with self._lock:
            self._refs[fd] = self._refs.get(fd, 1) - 1
            self._close_if_unused(fd)

    def _close_if_unused(self, fd: int) -> None:
        if fd in self._superseded and self._refs.get(fd, 0) <= 0:
            self._superseded.discard(fd)
            self._refs.pop(fd, None)
            os.close(fd)


_shared_fds = _SharedFds()


_SYS_ADD_RULE = ctypes.c_long(SYS_landlock_add_rule)
_RULE_PATH_BENEATH_C = ctypes.c_int(_RULE_PATH_BENEATH)
_ZERO = ctypes.c_uint32(0)


_rules_cache: dict[Confinement, _Rules] = {}
_rules_lock = threading.Lock()
os.register_at_fork(after_in_child=_forget_the_parents_locks)
_RULES_CACHED = 8


def _cached_rules(c: Confinement) -> _Rules:
    """The prepared rules of `c` (its private paths aside), built on first use and again
    when a path they name was replaced; at most _RULES_CACHED sets are kept open."""
    key = dataclasses.replace(c, private_paths=())
    with _rules_lock:
        rules = _rules_cache.pop(key, None)
        if rules is not None and not rules.fresh():
            rules.close()
            rules = None
        if rules is None:
            rules = _Rules(key)
        _rules_cache[key] = rules  # most recently used last
        while len(_rules_cache) > _RULES_CACHED:
            _rules_cache.pop(next(iter(_rules_cache))).close()
        return rules


def _open_rule(path: str, rights: int) -> tuple[int, int] | None:
    """An O_PATH fd of `path` and the rights that apply to it (None: it is absent)."""
    try:
        target = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return None  # absent on this machine (e.g. /lib32): nothing to grant
    try:
        if not stat.S_ISDIR(os.fstat(target).st_mode):
            rights &= _FILE_RIGHTS
    except BaseException:
        os.close(target)
        raise
    return target, rights


def _add_path_rule(ruleset: int, path: str, rights: int) -> None:
    opened = _open_rule(path, rights)
    if opened is None:
        return
    target, rights = opened
    try:
        rule = _PathBeneath(rights, target)
        done = _libc.syscall(ctypes.c_long(SYS_landlock_add_rule), ctypes.c_int(ruleset),
                             ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                             ctypes.c_uint32(0))  # fmt: skip
        if done < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_add_rule({path}): {os.strerror(err)}")
    finally:
        os.close(target)


# --------------------------------------------------------------------------- seccomp

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


# --------------------------------------------------------------------------- applying

_CLONE_NEWNS = 0x00020000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x2, 0x4, 0x8
_MS_REC, _MS_PRIVATE = 0x4000, 1 << 18
_MS_RDONLY, _MS_REMOUNT, _MS_BIND = 0x1, 0x20, 0x1000
_CLONE_NEWIPC = 0x08000000
_SYS_MOUNT_SETATTR, _AT_FDCWD, _AT_RECURSIVE = 442, -100, 0x8000
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_NOSUID, _MOUNT_ATTR_NODEV = 0x1, 0x2, 0x4


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _mount_setattr(path: bytes, *, recursive: bool, set_: int, clear: int) -> None:
    attr = _MountAttr(set_, clear, 0, 0)
    flags = _AT_RECURSIVE if recursive else 0
    if _libc.syscall(ctypes.c_long(_SYS_MOUNT_SETATTR), ctypes.c_int(_AT_FDCWD), path,
                     ctypes.c_uint(flags), ctypes.byref(attr),
                     ctypes.c_size_t(ctypes.sizeof(attr))) != 0:  # fmt: skip
        raise OSError(ctypes.get_errno(), f"mount_setattr({os.fsdecode(path)})")
_PR_SET_SECCOMP = 22
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_SECCOMP_MODE_FILTER = 2
_SIOCSIFFLAGS = 0x8914
_IFF_UP_RUNNING = 0x1 | 0x40
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def _last_cap() -> int:
    try:
        return int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        return 40


_ns_lock = threading.Lock()
_own_pid_ns = -1
_empty_net_ns = -1
_PR_SET_CHILD_SUBREAPER = 36
_CAP_SYS_ADMIN = 21


def _ns_fd(kind: str) -> int:
    return os.open(f"/proc/self/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC)


def namespace_admin() -> bool:
    """Whether this process may make namespaces without a user namespace of its own:
    CAP_SYS_ADMIN in its user namespace (root on a host, root of a rootless container).
    An ordinary user, or root stripped of CAP_SYS_ADMIN (Docker's default), needs one."""
    try:
        caps = int(_status_field("CapEff") or "0", 16)
    except (OSError, ValueError):
        return False
    return bool(caps >> _CAP_SYS_ADMIN & 1)


def initial_user_namespace() -> bool:
    """Whether this process is in the machine's first user namespace (where the PID
    namespace it was born in is owned, so that `setns` back to it is allowed)."""
    try:
        with open("/proc/self/uid_map") as f:
            return f.read().split() == ["0", "0", "4294967295"]
    except OSError:
        return False


class PidNamespaceLost(OSError):
    """`setns` back to our own PID namespace failed after a fork into a new one: every
    later fork of this process would land in that command's namespace. The process
    that forks (the spawner, never the agent) must stop forking: it exits, and the
    agent starts a new one."""


def fork_in_pid_namespace(c: Confinement) -> int:
    """Fork a child that is the first process (pid 1) of a PID namespace of its own,
    as `os.fork` does: its pid (as seen here) in the parent, 0 in the child.

    Two ways, the same result:

    - Root on the host (CAP_SYS_ADMIN in the first user namespace): ``unshare(
      CLONE_NEWPID)``, fork, ``setns`` back to our own namespace: one fork.
    - Otherwise (an ordinary user, root of a rootless container, root without
      CAP_SYS_ADMIN): an intermediate child makes the namespaces (``CLONE_NEWUSER``
      first when `c.new_userns`, mapping our uid and gid to themselves, then
      ``CLONE_NEWPID``), forks the command's first process and exits. `setns` back is
      not needed (the intermediate's namespaces die with it) and would be refused: our
      PID namespace belongs to a user namespace we hold no capability in. This process
      becomes a child subreaper (PR_SET_CHILD_SUBREAPER) so that the command's first
      process is reparented to it, not to init: it waits for it as for any child. The
      child waits for the intermediate to be gone before returning (a parent-death
      signal set before would fire at the intermediate's exit). bubblewrap's
      ``--unshare-user --unshare-pid`` does the same with a clone() and a monitor
      process; Python can only fork.

    Raises OSError naming the step that failed (PidNamespaceLost: see there); never
    ends the calling process.
    """
    if not c.new_userns and _can_setns_back():
        return _fork_with_setns_back()
    return _fork_through_intermediate(c)


def _fork_with_setns_back() -> int:
    global _own_pid_ns
    with _ns_lock:
        if _own_pid_ns < 0:
            _own_pid_ns = _ns_fd("pid")
    if _libc.unshare(ctypes.c_int(_CLONE_NEWPID)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWPID): {os.strerror(err)}")
    try:
        pid = os.fork()
    finally:
        if os.getpid() != 1 and _libc.setns(ctypes.c_int(_own_pid_ns),
                                            ctypes.c_int(_CLONE_NEWPID)) != 0:  # fmt: skip
            err = ctypes.get_errno()
            raise PidNamespaceLost(err, "setns back to our PID namespace failed: "
                                   f"{os.strerror(err)}")  # fmt: skip
    return pid


_subreaper_set = False


def _fork_through_intermediate(c: Confinement) -> int:
    global _subreaper_set
    if not _subreaper_set:
        if _libc.prctl(_PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(1), 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(err)}")
        _subreaper_set = True
    flags = _CLONE_NEWPID | (_CLONE_NEWUSER if c.new_userns else 0)
    maps = (
        ("/proc/self/setgroups", b"deny"),
        ("/proc/self/uid_map", b"%d %d 1" % (c.euid, c.euid)),
        ("/proc/self/gid_map", b"%d %d 1" % (c.egid, c.egid)),
    ) if c.new_userns else ()  # fmt: skip
    report_r, report_w = os.pipe2(os.O_CLOEXEC)
    try:
        middle = os.fork()
    except BaseException:
        os.close(report_r)
        os.close(report_w)
        raise
    if middle == 0:
        # The intermediate: it only ever leaves through os._exit.
        try:
            os.close(report_r)
            gone = os.pidfd_open(os.getpid())  # the child waits on it (see above)
            if _libc.unshare(ctypes.c_int(flags)) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"unshare(CLONE_NEW{'USER|CLONE_NEW' if c.new_userns else ''}"
                              f"PID): {os.strerror(err)}")  # fmt: skip
            for path, data in maps:
                fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)
            pid = os.fork()
        except BaseException as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            with contextlib.suppress(BaseException):
                os.write(report_w, f"E{why}".encode()[:4000])
            os._exit(1)
        if pid == 0:
            # The command's first process: once the intermediate is gone (and so we
            # are the caller's child), carry on as the caller's child.
            os.close(report_w)
            while not select.select([gone], [], [], None)[0]:
                pass
            os.close(gone)
            return 0
        with contextlib.suppress(BaseException):
            os.write(report_w, b"P%d" % pid)
        os._exit(0)
    os.close(report_w)
    try:
        chunks = []
        while True:
            chunk = os.read(report_r, 4096)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(report_r)
        os.waitpid(middle, 0)  # once it is reaped, its child is ours
    said = b"".join(chunks).decode("utf-8", "replace")
    if said.startswith("P") and said[1:].isdigit():
        return int(said[1:])
    raise OSError(errno.EPERM, said[1:] or "the process making the namespaces died")


def empty_network_namespace() -> int:
    """An fd of a network namespace with nothing in it (lo down), made once per process
    and joined by every command of network="none": creating a namespace per command
    costs ~0.7 ms, and its teardown more, in a kernel work queue. Commands that share it
    can reach nothing through it (lo is down, so not even each other), and a root
    command cannot bring lo up (no CAP_NET_ADMIN). Needs CAP_SYS_ADMIN."""
    global _empty_net_ns
    if not _can_setns_back():
        # This thread could not come back (see _shared_netns): never try.
        raise OSError(errno.EPERM, "an empty network namespace shared by setns needs "
                      "CAP_SYS_ADMIN in the first user namespace")  # fmt: skip
    with _ns_lock:
        if _empty_net_ns < 0:
            own = _ns_fd("net")
            try:
                if _libc.unshare(ctypes.c_int(_CLONE_NEWNET)) != 0:
                    raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")
                try:
                    _empty_net_ns = _ns_fd("net")
                finally:
                    # Only this thread moved; it moves back.
                    if _libc.setns(ctypes.c_int(own), ctypes.c_int(_CLONE_NEWNET)) != 0:
                        raise OSError(ctypes.get_errno(), "setns back to our network namespace")
            finally:
                os.close(own)
        return _empty_net_ns


def send_proxy_listeners(channel: int, ports: tuple[int, ...]) -> None:
    """In the command's child, inside its own network namespace with lo up: listen on
    127.0.0.1:PORT for each port, send the listeners to the agent's egress proxy over
    ``channel`` (SCM_RIGHTS) and close every copy here (sandbox/bash/network/handover.py
    says why)."""
    listeners = []
    try:
        for port in ports:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listeners.append(s)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen(128)
        with socket.socket(fileno=channel) as ch:
            socket.send_fds(ch, [b"ok"], [s.fileno() for s in listeners])
    finally:
        for s in listeners:
            s.close()


def _shared_netns(c: Confinement) -> bool:
    """Whether the command joins the one empty network namespace of this process: made
    by this thread, which then moves back with `setns`, which only root of the first
    user namespace may do (root of a rootless container may not: our own namespace is
    not its). Otherwise each command unshares its own."""
    return (c.new_netns and not c.new_userns and not c.loopback_up
            and _can_setns_back())  # fmt: skip


_setns_back: bool | None = None


def _can_setns_back() -> bool:
    global _setns_back
    if _setns_back is None:
        _setns_back = initial_user_namespace() and namespace_admin()
    return _setns_back


_seccomp_cache: dict[tuple[bool, bool], ctypes.Array[ctypes.c_char]] = {}


class Prepared:
    """A `Confinement` made ready in the process that will fork: the Landlock ruleset
    fd, the BPF program and every structure are built here, so that `apply`, run in
    the forked child, only makes system calls. What is the same from run to run (the
    Landlock rules of system paths, the BPF program, the empty network namespace) is
    built once per process and reused. Call `close` once the child exists (the ruleset
    fd is close-on-exec, so the child's copy goes away at exec)."""

    def __init__(self, c: Confinement) -> None:
        self.confinement = c
        self._ruleset = -1
        self._rules: _Rules | None = None
        self._etc_generation = 0
        self._own_mounts = False  # set in the child that made its own mount namespace
        self._empty_file = b""  # covers a protected name that is a symbolic link
        self.ahead = False  # a zygote's, applied ahead of its request (child.py)
        if c.protected is not None and c.protected.links:
            self._empty_file = _etc_secrets.placeholder_paths()[1]
        self._run_paths: tuple[str, ...] = ()  # a zygote's run's TMPDIR, given later
        if c.landlock_abi and (c.landlock_fs or c.landlock_net or c.landlock_scopes):
            self._rules = _cached_rules(c)
            self._ruleset = self._rules.ruleset(c.private_paths)
        try:
            which = (c.deny_unix_sockets, c.deny_inet_sockets)
            bpf = _seccomp_cache.get(which) if c.seccomp else None
            if c.seccomp and bpf is None:
                program = seccomp_program(deny_unix_sockets=c.deny_unix_sockets,
                                          deny_inet_sockets=c.deny_inet_sockets)  # fmt: skip
                bpf = _seccomp_cache[which] = ctypes.create_string_buffer(
                    program, len(program))
            self._bpf = bpf
            self._fprog = _SockFprog(len(bpf) // 8 if bpf is not None else 0,
                                     ctypes.addressof(bpf) if bpf is not None else 0)  # fmt: skip
            self._cap_header_buf = ctypes.create_string_buffer(
                struct.pack("=Ii", _LINUX_CAPABILITY_VERSION_3, 0), 8)
            self._cap_data_buf = ctypes.create_string_buffer(24)
            self._caps = _CAPS
            self._ifreq = struct.pack("16sH14s", b"lo", _IFF_UP_RUNNING, b"")
            self._uid_map = b"%d %d 1" % (c.euid, c.euid)
            self._gid_map = b"%d %d 1" % (c.egid, c.egid)
            self._netns = empty_network_namespace() if _shared_netns(c) else -1
            self._covers: list[tuple[bytes, bytes]] = []
            self._placeholder_root = b""
            if c.hide_etc_secrets:
                root, file, directory = _etc_secrets.placeholder_paths()
                self._placeholder_root = root
                self._covers = [(directory if is_dir else file, path)
                                for path, is_dir in _etc_secrets.entries()]  # fmt: skip
                self._etc_generation = _etc_secrets.generation
            # With a PID namespace of its own, the user namespace around it was made by
            # `fork_in_pid_namespace`, before the child existed.
            self._own_userns = c.new_userns and not c.private_proc
            self._unshare_flags = (
                (_CLONE_NEWNET if c.new_netns and self._netns < 0 else 0)
                | (_CLONE_NEWUSER if self._own_userns else 0)
                | (_CLONE_NEWNS if c.protected_mount_ns else 0)
            )
        except BaseException:
            self.close()
            raise

    # Each step raises OSError naming itself; CPython's preexec_fn machinery turns any
    # exception into SubprocessError("Exception occurred in preexec_fn."), and the
    # process layer reports it.

    def apply_namespaces(self) -> None:
        c = self.confinement
        if self._netns >= 0 and _libc.setns(ctypes.c_int(self._netns),
                                            ctypes.c_int(_CLONE_NEWNET)) != 0:  # fmt: skip
            raise OSError(ctypes.get_errno(), "setns(empty network namespace)")
        if self._unshare_flags:
            if _libc.unshare(ctypes.c_int(self._unshare_flags)) != 0:
                raise OSError(ctypes.get_errno(), "unshare")
        if self._own_userns:
            for path, data in (
                ("/proc/self/setgroups", b"deny"),
                ("/proc/self/uid_map", self._uid_map),
                ("/proc/self/gid_map", self._gid_map),
            ):
                fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)
        if c.loopback_up:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                fcntl.ioctl(s.fileno(), _SIOCSIFFLAGS, self._ifreq)
            finally:
                s.close()
            if c.proxy_channel >= 0:
                send_proxy_listeners(c.proxy_channel, c.proxy_ports)
        if c.protected_mount_ns and c.protected is not None:  # sandbox/bash/linux/protected.py
            _protected.apply_in_new_mount_namespace(c.protected, self._empty_file,
                                                    strict=not self.ahead)  # fmt: skip
            self._own_mounts = True
        if c.private_proc:
            self._private_proc()

    def _private_proc(self) -> None:
        # A /proc mounted by the first process of a PID namespace lists that namespace
        # only. Mounted in a mount namespace of the command's own, private so that
        # nothing propagates back to the host's.
        if os.getpid() != 1:
            raise OSError(errno.EINVAL, "private /proc: the child is not the first process "
                          "of a new PID namespace (fork it with "
                          "confinement.fork_in_pid_namespace())")
        # An IPC namespace too: SysV shared memory, queues and semaphores are otherwise
        # the host's, and uid 0 owns root's segments.
        if _libc.unshare(ctypes.c_int(_CLONE_NEWNS | _CLONE_NEWIPC)) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS|CLONE_NEWIPC)")
        if _libc.mount(None, b"/", None, ctypes.c_ulong(_MS_REC | _MS_PRIVATE), None) != 0:
            raise OSError(ctypes.get_errno(), "mount(/, MS_REC|MS_PRIVATE)")
        if _libc.mount(b"proc", b"/proc", b"proc",
                       ctypes.c_ulong(_MS_NOSUID | _MS_NODEV | _MS_NOEXEC), None) != 0:  # fmt: skip
            raise OSError(ctypes.get_errno(), "mount(proc, /proc)")
        if self._covers:
            # The placeholders on a read-only mount first: bind mounts made from there
            # are read-only too, so not even their owner can chmod them.
            root = self._placeholder_root
            for source, flags in ((root, _MS_BIND), (None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY)):
                if _libc.mount(source, root, None, ctypes.c_ulong(flags), None) != 0:
                    raise OSError(ctypes.get_errno(), "mount(placeholders, read-only)")
            for source, target in self._covers:
                if _libc.mount(source, target, None, ctypes.c_ulong(_MS_BIND), None) != 0:
                    err = ctypes.get_errno()
                    if err != errno.ENOENT:  # removed since the scan: nothing to cover
                        raise OSError(err, f"cover {os.fsdecode(target)}")
        if self._ruleset >= 0 and self.confinement.landlock_fs:
            # The rule names the new /proc's inode, which exists only from here on.
            _add_path_rule(self._ruleset, "/proc", _read_rights())
        self._own_mounts = True  # this process's mount namespace: see lock_mounts

    def lock_mounts(self) -> None:
        """In the child's own mount namespace (private /proc), after it joined its
        cgroups and before it drops its capabilities: every mount read-only and nosuid
        but the paths the command may write. Landlock does not govern chmod, utime or
        extended attributes, and root owns root's files: without this a command could
        chmod 4755 a root binary of the host, or make /etc/passwd writable."""
        if not self._own_mounts or os.getpid() != 1:
            return  # never in a shared mount namespace
        writable = [os.fsencode(p) for p in (*self.confinement.write_paths,
                                             *self.confinement.private_paths,
                                             *self._run_paths)
                    if os.path.exists(p)]
        for path in writable:
            self._bind_self(path)
        _mount_setattr(b"/", recursive=True, set_=_MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID,
                       clear=0)
        for path in writable:
            # nodev: a device node there is inert (/dev/shm included), but for a
            # device file granted itself and the directories of devices (/dev, /dev/pts).
            nodev = _MOUNT_ATTR_NODEV if os.path.isdir(path) and path not in (
                b"/dev", b"/dev/pts") else 0  # fmt: skip
            _mount_setattr(path, recursive=False, set_=nodev, clear=_MOUNT_ATTR_RDONLY)
        if self.confinement.protected is not None:  # sandbox/bash/linux/protected.py
            _protected.apply_mounts(self.confinement.protected, self._empty_file,
                                    strict=not self.ahead)  # fmt: skip
        # The working directory was entered before the bind mounts: enter it again, so
        # that relative paths resolve on the writable mount on top.
        os.chdir(os.getcwd())

    @staticmethod
    def _bind_self(path: bytes) -> None:
        if _libc.mount(path, path, None, ctypes.c_ulong(_MS_BIND), None) != 0:
            raise OSError(ctypes.get_errno(), f"bind {os.fsdecode(path)}")

    def still_fresh(self) -> bool:
        """Whether what was prepared still matches the machine: no path of a Landlock
        rule replaced, no entry of /etc created, removed or chmod'ed since (for a
        zygote, prepared ahead of its request)."""
        c = self.confinement
        if self._rules is not None and _cached_rules(c) is not self._rules:
            return False
        if c.hide_etc_secrets:
            _etc_secrets.entries()
            return _etc_secrets.generation == self._etc_generation
        return True

    def stale_in_zygote(self) -> str:
        """In a zygote (forked after this was prepared), given a request straight from
        the agent: '' if what was prepared still matches the machine, else what
        changed. Reads the shared state without touching the forking process's."""
        if self._rules is not None and not self._rules.fresh():
            return "a path of a Landlock rule was replaced"
        if self.confinement.hide_etc_secrets and _etc_secrets.stale_since(
                self._etc_generation):  # fmt: skip
            return "/etc changed"
        return self.protected_stale()

    def protected_stale(self) -> str:
        """In a zygote whose mounts were made ahead: '' if every protected path is still
        a read-only mount (a file renamed over one on the host detaches it), else what
        is not."""
        if self.confinement.protected is None or not self._own_mounts:
            return ""
        return _protected.still_protected(self.confinement.protected)

    def zygote_fds(self) -> tuple[int, ...]:
        """The descriptors a zygote still needs once its namespaces are made: the
        ruleset, and the /etc watch its staleness check reads."""
        return tuple(fd for fd in (self._ruleset, _etc_secrets.watch_fd) if fd >= 0)

    def grant_private_paths(self, paths: tuple[str, ...]) -> None:
        """Add read-write rules for `paths` to this (not yet applied) ruleset: a zygote
        learns its run's private paths only once a request comes."""
        if self._ruleset >= 0 and self.confinement.landlock_fs:
            for path in paths:
                _add_path_rule(self._ruleset, path, _fs_rights(self.confinement.landlock_abi))
        self._run_paths = paths  # writable when lock_mounts makes the rest read-only

    def drop_bounding_set(self) -> None:
        if not self.confinement.drop_capabilities:
            return
        for cap in self._caps:
            if _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                err = ctypes.get_errno()
                if err == errno.EPERM:
                    return  # unprivileged, no user namespace: holds none to drop
                if err != errno.EINVAL:
                    raise OSError(err, "PR_CAPBSET_DROP")

    def drop_capabilities(self) -> None:
        if not self.confinement.drop_capabilities:
            return
        if _libc.syscall(ctypes.c_long(SYS_capset), self._cap_header_buf,
                         self._cap_data_buf) != 0:  # fmt: skip
            raise OSError(ctypes.get_errno(), "capset")
        _libc.prctl(_PR_CAP_AMBIENT, ctypes.c_ulong(_PR_CAP_AMBIENT_CLEAR_ALL), 0, 0, 0)

    def restrict(self) -> None:
        c = self.confinement
        if c.no_new_privs or self._ruleset >= 0 or c.seccomp:
            if _libc.prctl(_PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
        if self._ruleset >= 0:
            done = _libc.syscall(ctypes.c_long(SYS_landlock_restrict_self),
                                 ctypes.c_int(self._ruleset), ctypes.c_uint32(0))  # fmt: skip
            if done != 0:
                raise OSError(ctypes.get_errno(), "landlock_restrict_self")
        if c.seccomp:
            if _libc.prctl(_PR_SET_SECCOMP, ctypes.c_ulong(_SECCOMP_MODE_FILTER),
                           ctypes.byref(self._fprog), 0, 0) != 0:  # fmt: skip
                raise OSError(ctypes.get_errno(), "seccomp")

    def apply(self) -> None:
        """Everything, for a child that keeps its identity (see the module doc)."""
        self.apply_namespaces()
        self.lock_mounts()
        self.drop_bounding_set()
        self.drop_capabilities()
        self.restrict()

    def close(self) -> None:
        if self._ruleset >= 0:
            os.close(self._ruleset)
            self._ruleset = -1

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass


_CAPS = [ctypes.c_ulong(cap) for cap in range(_last_cap() + 1)]


def prepare(confinement: Confinement) -> Prepared:
    """Build, before the fork, everything `Prepared.apply` needs after it. A
    confinement with private_proc must then be forked by `fork_in_pid_namespace`."""
    return Prepared(confinement)


def describe_kernel() -> dict[str, object]:
    """For `sandbox doctor`: each layer, available or not and why."""
    kernel = detect()
    layers: dict[str, str] = {}
    for layer in LAYERS:
        if kernel.has(layer):
            detail = {
                "landlock-fs": f"Landlock ABI {kernel.landlock_abi}",
                "landlock-net": f"Landlock ABI {kernel.landlock_abi} (TCP bind/connect)",
                "landlock-scopes": f"Landlock ABI {kernel.landlock_abi} (signals, "
                "abstract unix sockets)",
                "seccomp": f"BPF filter, {len(DENIED_SYSCALLS)} syscalls denied",
                "capabilities": "dropped, bounding set included" if kernel.root
                else "unprivileged (none held)",
                "no-new-privs": "prctl(PR_SET_NO_NEW_PRIVS)",
                "netns": "one empty namespace per agent, joined with setns() (per "
                "command for network='loopback')" if _can_setns_back()
                else "a network namespace per command, in its user namespace",
                "private-proc": "a PID namespace per command and a fresh /proc in its own "
                "mount namespace" + ("" if _can_setns_back() else ", in a user namespace "
                                     "of its own"),
            }[layer]
            layers[layer] = f"available: {detail}"
        else:
            layers[layer] = f"unavailable: {kernel.missing[layer]}"
    layers["protected-paths"] = _protected.describe_mechanism(  # sandbox/bash/linux/protected.py
        private_proc=kernel.has("private-proc"), landlock=kernel.has("landlock-fs"))
    return {"landlock_abi": kernel.landlock_abi, "layers": layers}
