"""`sandbox doctor`: which protections this machine gives a command, each layer active or
not and why (`detect_protections`), and the network modes (`network_modes`)."""

from __future__ import annotations

import os
from typing import Any

from sandbox.bash.linux.confinement import (
    describe_kernel,
    initial_user_namespace,
    namespace_admin,
)
from sandbox.bash.linux.confinement import detect as detect_confinement
from sandbox.bash.run.containment import (
    MECHANISMS,
    availability,
    choose,
)
from sandbox.bash.run.process import find_bash
from sandbox.errors import ConfigurationError

# How long the child may take to hand the proxy's listeners over (its set-up, before
# exec: milliseconds unless the machine is overloaded).
_HANDOVER_SECONDS = 30.0

def detect_protections() -> dict[str, Any]:
    """Which containment mechanisms work here, which one `run_bash` uses, and how
    max_child_processes and the other limits are enforced (for `sandbox doctor`).

    Probes each mechanism once per process (a few milliseconds; cached).
    """
    # Root of the machine: uid 0 of the first user namespace. Root of a rootless
    # container is an ordinary uid to the kernel's RLIMIT_NPROC.
    root = os.geteuid() == 0 and initial_user_namespace()
    report: dict[str, Any] = {"running_as_root": os.geteuid() == 0,
                              "in_user_namespace": not initial_user_namespace()}
    try:
        shell = find_bash()
    except ConfigurationError as e:
        report.update(bash=None, error=str(e), containment=None)
        return report
    report["bash"] = shell
    mechanisms = {}
    for name in MECHANISMS:
        found = availability(name, shell)
        mechanisms[name] = {"available": found.available, "detail": found.detail}
    report["mechanisms"] = mechanisms
    unconfined = choose("auto", shell)
    kernel = detect_confinement()
    # What runs really use: a confined run (the default) with a private /proc is the
    # first process of a PID namespace of its own, which beats all but the cgroups.
    if unconfined in ("pidns", "subreaper", "killpg") and kernel.has("private-proc"):
        report["containment"] = "pidns"
        report["containment_detail"] = (
            "confined runs: a PID namespace of the command's own, made by the spawner"
            + ("" if namespace_admin() and initial_user_namespace()
               else " in a user namespace of the command's own")
            + f"; runs with confinement='none': {unconfined}")
    else:
        report["containment"] = unconfined
        report["containment_detail"] = f"every run: {unconfined}"
    pids = availability("pids", shell)
    if pids.available:
        nproc = "pids-cgroup"
    elif root:
        nproc = "rlimit-only(ineffective as root)"
    elif kernel.has("private-proc") and not (namespace_admin() and initial_user_namespace()):
        # Each command in a user namespace of its own: RLIMIT_NPROC counts its own.
        nproc = "rlimit-userns"
    else:
        nproc = "rlimit"
    report["max_child_processes"] = {
        "enforcement": nproc,  # confined runs (the default)
        "enforcement_unconfined": nproc if nproc != "rlimit-userns" else "rlimit",
        "pids_cgroup": {"available": pids.available, "detail": pids.detail},
        "with_drop_privileges": "pids-cgroup" if pids.available else "setuid:<uid>",
    }
    try:
        pidfd = os.pidfd_open(os.getpid())
        os.close(pidfd)
        report["exit_detection"] = "pidfd"
    except (AttributeError, OSError) as e:
        report["exit_detection"] = f"polling waitid ({getattr(e, 'strerror', e)})"
    report["setup_in_child"] = (
        "cgroup placement by a builtin-only shell prologue (no preexec_fn, vfork fast "
        "path); rlimits through preexec_fn when any limit is set (rlimits_via="
        "'prologue' uses bash's ulimit instead); preexec_fn always with drop_privileges"
    )
    confined = detect_confinement()
    raise_again = (
        "enforced (a root command cannot raise it: its capabilities are dropped)"
        if confined.has("capabilities")
        else "enforced (can be raised again by a root command)"
    )
    report["rlimits"] = {
        "RLIMIT_AS": raise_again if root else "enforced",
        "RLIMIT_FSIZE": raise_again if root else "enforced",
        "RLIMIT_NPROC": "ineffective for root (uid 0 is exempt even without capabilities)"
        if root
        else "enforced, counting the command's own processes (its own user namespace)"
        if nproc == "rlimit-userns"
        else "enforced per uid (counts every process of this uid)",
        "RLIMIT_CORE": "0 whenever a limit is set",
    }
    confinement = describe_kernel()
    report["confinement"] = confinement
    landlock = confined.has("landlock-fs")
    report["agent_environment_readable_by_command"] = (
        "no: the command has a PID namespace and a /proc of its own, where the agent "
        "does not exist (and Landlock forbids ptrace access outside its domain)"
        if landlock and confined.has("private-proc")
        else "no: Landlock forbids ptrace access (and so /proc/<pid>/environ) outside the "
        "command's domain"
        if landlock
        else "yes via /proc/<agent pid>/environ, unless drop_privileges=True"
        if root
        else "only by processes of the same uid (the command runs as this uid)"
    )
    report["network"] = network_modes(confined)
    return report


def network_modes(confined: Any) -> dict[str, str]:
    """What each policy `network` mode gives a command on this machine."""
    netns = confined.has("netns")
    why = "" if netns else confined.missing.get("netns", "no network namespace")
    fallback = "TCP denied by Landlock" if confined.has("landlock-net") else (
        "no TCP restriction at all: Landlock's network rules are missing too")  # fmt: skip
    return {
        "none": "available: an empty network namespace" if netns
        else f"degraded: {why}; {fallback}",
        "loopback": "available: a private namespace per command, lo up" if netns
        else f"degraded: {why}; {fallback}",
        "allowlist": "available: a private namespace per command holding only the "
        "agent's egress proxy (HTTP 127.0.0.1:3128, SOCKS5 127.0.0.1:1080); names "
        "checked against allowed_domains, resolved by the proxy" if netns
        else f"degraded: {why}; {fallback} (no proxy can be reached)",
        "host": "the host's network, unrestricted",
    }
