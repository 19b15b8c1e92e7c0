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

import contextlib
import ctypes
import dataclasses
import errno
import os
import platform
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sandbox.bash.config import (
    CONFINEMENT_MODES,
    FILESYSTEM_MODES,
    LAYERS,
    NETWORK_MODES,
    UNAVAILABLE_ENV,
    ConfinementRequest,
    ConfinementUnavailable,
)
from sandbox.bash.linux import protected as _protected
from sandbox.bash.linux import protected_apply
from sandbox.bash.linux.apply import Prepared, prepare
from sandbox.bash.linux.etc import ETC, _etc_rules
from sandbox.bash.linux.landlock import DEVICE_PATHS, SYSTEM_READ_PATHS
from sandbox.bash.linux.namespaces import (
    PidNamespaceLost,
    _can_setns_back,
    _shared_netns,
    fork_in_pid_namespace,
    initial_user_namespace,
    namespace_admin,
)
from sandbox.bash.linux.seccomp import _SECCOMP_ARCH, DENIED_SYSCALLS, seccomp_program
from sandbox.bash.linux.syscalls import SYS_landlock_create_ruleset, _libc, _status_field, _why

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
    "PidNamespaceLost",
    "Prepared",
    "describe_kernel",
    "detect",
    "fork_in_pid_namespace",
    "initial_user_namespace",
    "namespace_admin",
    "plan",
    "prepare",
    "seccomp_program",
]




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

    def __hash__(self) -> int:
        return cached_hash(self)

    def __getstate__(self) -> dict[str, object]:
        return state_without_hash(self)


def cached_hash(obj: Any) -> int:
    """The hash of frozen dataclass `obj` (its fields, as the generated __hash__ takes
    them), computed once per object: a run's setup and confinement key its zygote and
    are looked up several times a run, and hashing every path they hold costs ~10 µs.
    Kept in the instance dict, which `state_without_hash` leaves out of a pickle (a
    hash differs from process to process)."""
    found: int | None = obj.__dict__.get("_hash")
    if found is None:
        found = hash(tuple([getattr(obj, f.name) for f in dataclasses.fields(obj)
                            if (f.compare if f.hash is None else f.hash)]))  # fmt: skip
        object.__setattr__(obj, "_hash", found)
    return found


def state_without_hash(obj: Any) -> dict[str, object]:
    state = dict(obj.__dict__)
    state.pop("_hash", None)
    return state


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
    global _detect_lock
    _detect_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_the_parents_locks)
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
    confinement = protected_apply.plan_layer(  # sandbox/bash/linux/protected.py
        confinement, report, protected=request.protected, filesystem=request.filesystem,
        mode=request.mode, own_mounts=private_proc, root=root)  # fmt: skip
    return confinement, report




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
    layers["protected-paths"] = protected_apply.describe_mechanism(  # sandbox/bash/linux/protected.py
        private_proc=kernel.has("private-proc"), landlock=kernel.has("landlock-fs"))
    return {"landlock_abi": kernel.landlock_abi, "layers": layers}
