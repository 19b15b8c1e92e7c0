"""The environment matrix: the escape probes (tests/programs/escape_agent.py) run by an
agent in each environment agents really run in, set up here on this machine.

Used by tests/bash/linux/test_environments.py, and as a script to print SECURITY.md's table:

    sudo .venv/bin/python -m tests.matrix [REPETITIONS]

Needs root (it makes a throwaway user with useradd and removes it after). Every
environment runs in a process of its own, all at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.paths import REPO

REPO = REPO
PROGRAMS = REPO / "tests" / "programs"
AGENT = PROGRAMS / "escape_agent.py"
RESTRICTED = PROGRAMS / "restricted.py"


@dataclass(frozen=True)
class Environment:
    name: str
    description: str
    unprivileged: bool = False  # the agent runs as the throwaway user
    userns: bool = False  # ... inside `unshare --user --map-root-user`
    restricted: str = ""  # a seccomp filter (restricted.py MODE)
    drop_sys_admin: bool = False
    delegated_cgroup: bool = False  # started in a cgroup v2 owned by the user
    env: dict[str, str] = field(default_factory=dict)


ENVIRONMENTS = (
    Environment("root", "root on the host"),
    Environment("user", "an ordinary user", unprivileged=True),
    Environment("user-in-userns", "an ordinary user inside `unshare --user --map-root-user` "
                "(rootless Podman)", unprivileged=True, userns=True),
    Environment("user-delegated-cgroup", "an ordinary user in a cgroup delegated to it "
                "(a systemd user slice)", unprivileged=True, delegated_cgroup=True),
    Environment("root-docker-seccomp", "root without CAP_SYS_ADMIN, seccomp denying "
                "unshare/setns/mount/clone with namespace flags (Docker's default)",
                restricted="docker", drop_sys_admin=True),
    Environment("user-no-userns", "an ordinary user, user namespaces unavailable",
                unprivileged=True, restricted="no-userns"),
    Environment("root-no-landlock", "root, Landlock absent (simulated)",
                env={"SANDBOX_CONFINEMENT_UNAVAILABLE": "landlock"}),
    Environment("user-no-landlock", "an ordinary user, Landlock absent (simulated)",
                unprivileged=True, env={"SANDBOX_CONFINEMENT_UNAVAILABLE": "landlock"}),
)  # fmt: skip

# Each probe, and the layers of which any one holds it.
PROTECTED_BY: dict[str, tuple[str, ...]] = {
    "write-outside": ("landlock-fs",),
    "read-private-file": ("landlock-fs",),
    "read-etc-shadow": ("landlock-fs", "not-host-root"),
    "proc-lists-others": ("private-proc",),
    "read-other-cmdline": ("private-proc",),
    "read-agent-environ": ("private-proc", "landlock-fs"),
    "kill-outside": ("private-proc", "landlock-scopes"),
    "tcp-to-host-loopback": ("netns", "landlock-net"),
    "udp-to-host-loopback": ("netns", "seccomp"),
    "unix-socket-outside": ("seccomp",),
    "capabilities-left": ("capabilities",),
    "survivor-setsid-exit": ("whole-tree",),
    "survivor-setsid-timeout": ("whole-tree",),
    "survivor-double-fork": ("whole-tree",),
    "survivor-daemon-nohup": ("whole-tree",),
    "nproc-counts-own-only": ("own-nproc",),
    "nproc-bounds-command": ("own-nproc",),
}
WHOLE_TREE = ("cgroup2", "cgroup1-freezer", "pidns", "subreaper")


def _world_reachable(path: Path) -> bool:
    for part in [path, *path.parents]:
        try:
            mode = part.stat().st_mode
        except OSError:
            return False
        if not mode & stat.S_IXOTH or (part == path and not mode & stat.S_IROTH):
            return False
    return True


def python_for_everyone() -> str | None:
    """An interpreter of this Python version every user can run (the venv's may live
    under /root, 0700)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        if candidate and os.path.exists(candidate) and _world_reachable(
                Path(os.path.realpath(candidate)).parent):  # fmt: skip
            return candidate
    return None


def site_packages() -> list[str]:
    return [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]


def unavailable() -> str:
    """'' if the matrix can run here, else why not."""
    if os.geteuid() != 0:
        return "needs root (makes a throwaway user)"
    for tool in ("setpriv", "unshare", "useradd", "userdel"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    if python_for_everyone() is None:
        return "no Python of this version that every user can run"
    if not all(_world_reachable(Path(p)) for p in [str(REPO), *site_packages()]):
        return "the checkout or its site-packages is not reachable by other users"
    return ""


@contextlib.contextmanager
def throwaway_user() -> Iterator[str]:
    name = f"sbxmx{uuid.uuid4().hex[:10]}"
    subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", name], check=True,
                   capture_output=True)  # fmt: skip
    try:
        yield name
    finally:
        _kill_processes_of(name)
        subprocess.run(["userdel", "-f", name], capture_output=True, check=False)


def _kill_processes_of(user: str) -> None:
    """SIGKILL, by pid, what the throwaway user still runs (an escape the probes missed
    must not outlive the test)."""
    import pwd
    import signal

    uid = pwd.getpwnam(user).pw_uid
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    os.kill(int(entry), signal.SIGKILL)


def argv_for(env: Environment, user: str, repetitions: int) -> list[str]:
    python = python_for_everyone()
    assert python is not None
    path = ":".join([str(REPO), *site_packages()])
    variables = {"PATH": "/usr/bin:/bin", "PYTHONPATH": path, "HOME": "/tmp", **env.env}
    argv = [python, str(AGENT), str(repetitions)]
    if env.restricted:
        argv = [python, str(RESTRICTED), env.restricted, *argv]
    if env.userns:
        argv = ["unshare", "--user", "--map-root-user", *argv]
    argv = ["env", "-i", *(f"{k}={v}" for k, v in variables.items()), *argv]
    if env.unprivileged:
        argv = ["setpriv", "--reuid", user, "--regid", user, "--clear-groups", *argv]
    if env.drop_sys_admin:
        argv = ["setpriv", "--bounding-set", "-sys_admin", *argv]
    if env.delegated_cgroup:
        argv = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"',
                str(delegated_cgroup(user)), *argv]
    return argv


def _cgroup2_root() -> Path | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[fields.index("-") + 1] == "cgroup2":
            return Path(fields[4])
    return None


def delegated_cgroup(user: str) -> Path:
    """A cgroup v2 directory owned by `user` (as systemd delegates user@UID.service)."""
    root = _cgroup2_root()
    assert root is not None
    path = root / f"sandbox-matrix-{user}"
    path.mkdir(exist_ok=True)
    import pwd

    entry = pwd.getpwnam(user)
    for item in [path, *path.iterdir()]:
        os.chown(item, entry.pw_uid, entry.pw_gid)
    return path


def _remove_cgroup(path: Path) -> None:
    """Bottom up; empty by now (the agent and everything under it exited)."""
    if not path.is_dir():
        return
    for child in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):
            child.rmdir()
    with contextlib.suppress(OSError):
        path.rmdir()


def run(repetitions: int = 20, timeout: float = 600) -> dict[str, dict[str, Any]]:
    """Every environment at once; per environment the agent's report (or its
    failure: "returncode" and "stderr")."""
    results: dict[str, dict[str, Any]] = {}
    environments = [env for env in ENVIRONMENTS
                    if not env.delegated_cgroup or _cgroup2_root() is not None]  # fmt: skip
    with throwaway_user() as user:
        running = {env.name: subprocess.Popen(
            argv_for(env, user, repetitions), cwd="/tmp", stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for env in environments}  # fmt: skip
        for name, proc in running.items():
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            report: dict[str, Any] = {"returncode": proc.returncode, "stderr": err[-4000:]}
            with contextlib.suppress(ValueError, IndexError):
                report.update(json.loads(out.strip().splitlines()[-1]))
            results[name] = report
        root = _cgroup2_root()
        if root is not None:
            _remove_cgroup(root / f"sandbox-matrix-{user}")
    return results


def active(report: dict[str, Any], layer: str) -> bool:
    layers = report.get("layers", {})
    if layer == "whole-tree":
        tree = layers.get("process-tree", "")
        return any(tree.startswith(f"active: {m}") for m in WHOLE_TREE)
    if layer == "own-nproc":
        # A pids cgroup, or RLIMIT_NPROC in the command's own user namespace (per uid
        # it counts the user's other processes too: with 30 running, none could fork).
        how = str(layers.get("max-child-processes", ""))
        return "pids-cgroup" in how or "rlimit-userns" in how
    if layer == "not-host-root":
        return report.get("uid") != 0 or report.get("env") in ("user-in-userns",)
    return str(layers.get(layer, "")).startswith("active")


def verdicts(name: str, report: dict[str, Any]) -> dict[str, tuple[bool, bool]]:
    """Per probe: (held, expected to hold given the layers active)."""
    report = {**report, "env": name}
    out = {}
    for probe, layers in PROTECTED_BY.items():
        held = report.get("probes", {}).get(probe, {}).get("held", False)
        out[probe] = (bool(held), any(active(report, layer) for layer in layers))
    return out


def table(results: dict[str, dict[str, Any]]) -> str:
    """SECURITY.md's table: environment x protection, and the probes held."""
    shown = ("process-tree", "landlock-fs", "landlock-net", "landlock-scopes", "seccomp",
             "capabilities", "netns", "private-proc")  # fmt: skip
    head = ["environment", *shown, "escapes held"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for env in ENVIRONMENTS:
        report = results.get(env.name, {})
        layers = report.get("layers", {})
        cells = [f"{env.name}: {env.description}"]
        for layer in shown:
            state = str(layers.get(layer, "?"))
            if layer == "process-tree":
                cells.append(state.split(": ", 1)[-1].split(" ")[0])
            else:
                cells.append("yes" if state.startswith("active") else "**no**")
        found = verdicts(env.name, report)
        held = sum(h for h, _ in found.values())
        lost = [probe for probe, (h, _) in found.items() if not h]
        cells.append(f"{held} of {len(found)}" + (f" (lost: {', '.join(lost)})" if lost else ""))
        if report.get("returncode") != 0:
            cells[-1] = f"agent failed ({report.get('returncode')})"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    why = unavailable()
    if why:
        sys.exit(f"the matrix cannot run here: {why}")
    found = run(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
    print(table(found))
    for name, report in found.items():
        if report.get("returncode") != 0:
            print(f"\n{name} failed:\n{report.get('stderr')}", file=sys.stderr)
