"""An agent that attacks its own sandbox: the escape probes of the environment matrix.

Run by tests/bash/linux/test_environments.py in each environment (root, a throwaway user, that
user inside `unshare --user --map-root-user`, root without CAP_SYS_ADMIN under a
Docker-like seccomp filter, a user without user namespaces, Landlock absent). It runs
every probe through `ExecuteBashTool` under the DEFAULT policy, each as a script the
policy cannot see into (`bash .probe.sh`), so only the OS layer stands, and prints one
JSON object: the layers the runs reported, and per probe whether it was held (the
escape failed, checked by its effect) with what was seen.

Usage: escape_agent.py REPETITIONS
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sandbox import BashToolPolicy, ExecuteBashTool, ToolConfirmation, ToolContext


def ctx() -> ToolContext:
    return ToolContext(function_call_id="c1", tool_confirmation=ToolConfirmation(confirmed=True))


def marked(marker: str) -> list[int]:
    """Live processes whose command line holds `marker` (escapes that survived)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            state = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state not in (b"Z", b"X"):
            found.append(int(name))
    return found


async def main() -> None:
    repetitions = int(sys.argv[1])
    ws = Path(tempfile.mkdtemp(prefix="sandbox-matrix-ws-"))
    outside = Path(tempfile.mkdtemp(prefix="sandbox-matrix-outside-"))
    secret = outside / "secret"
    secret.write_text("s3cret\n")
    secret.chmod(0o600)
    victim = subprocess.Popen(["sleep", "300"])
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    tcp.setblocking(False)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.setblocking(False)
    unix_path = outside / "agent.sock"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(unix_path))
    unix.listen(8)
    unix.setblocking(False)
    outside.chmod(0o755)  # the socket's directory: reachable but for the sandbox
    tool = ExecuteBashTool(workspace=ws, policy=BashToolPolicy(timeout_seconds=5))
    layers: dict[str, str] = {}
    probes: dict[str, dict[str, Any]] = {}

    async def run(script: str, timeout: float | None = None) -> dict[str, Any]:
        (ws / ".probe.sh").write_text(script + "\n")
        if timeout is not None:
            tool.policy = BashToolPolicy(timeout_seconds=timeout)
        try:
            result: dict[str, Any] = await tool.run_async(
                args={"command": "bash .probe.sh"}, tool_context=ctx())
        finally:
            tool.policy = BashToolPolicy(timeout_seconds=5)
        if isinstance(result.get("containment"), dict):
            layers.update(result["containment"])
        return result

    def note(name: str, held: bool, seen: object) -> None:
        probes[name] = {"held": held, "seen": str(seen)[:300]}

    r = await run(f"echo x > {outside}/written; echo x > /var/tmp/sandbox-matrix-$$ && rm -f "
                  "/var/tmp/sandbox-matrix-$$; echo done")
    note("write-outside", not (outside / "written").exists(), r.get("stderr") or r.get("error"))
    r = await run(f"cat {secret}")
    note("read-private-file", "s3cret" not in r.get("stdout", ""), r.get("stderr") or r.get("error"))
    r = await run("cat /etc/shadow | head -c 60")
    note("read-etc-shadow", ":" not in r.get("stdout", ""), r.get("stdout") or r.get("stderr"))
    r = await run("ls /proc | grep -c '^[0-9]'")
    count = int((r.get("stdout") or "0").strip() or 0)
    note("proc-lists-others", count <= 8, f"{count} pids visible")
    r = await run(f"cat /proc/{victim.pid}/cmdline")
    note("read-other-cmdline", "sleep" not in r.get("stdout", ""), r.get("stdout") or r.get("stderr"))
    r = await run(f"cat /proc/{os.getpid()}/environ | wc -c")
    note("read-agent-environ", (r.get("stdout") or "0").strip() == "0", r.get("stdout"))
    r = await run(f"kill -9 {victim.pid}; echo $?")
    time.sleep(0.05)
    note("kill-outside", victim.poll() is None, r.get("stdout"))
    r = await run(f"exec 3<>/dev/tcp/127.0.0.1/{tcp.getsockname()[1]} && echo connected")
    time.sleep(0.05)
    try:
        tcp.accept()[0].close()
        accepted = True
    except BlockingIOError:
        accepted = False
    note("tcp-to-host-loopback", not accepted, r.get("stdout") or r.get("stderr"))
    r = await run(f"echo hi > /dev/udp/127.0.0.1/{udp.getsockname()[1]}; echo $?")
    time.sleep(0.05)
    try:
        udp.recv(100)
        received = True
    except BlockingIOError:
        received = False
    note("udp-to-host-loopback", not received, r.get("stdout") or r.get("stderr"))
    r = await run(f"python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); "
                  f"s.connect('{unix_path}'); print('connected')\"")
    time.sleep(0.05)
    try:
        unix.accept()[0].close()
        reached = True
    except BlockingIOError:
        reached = False
    note("unix-socket-outside", not reached, r.get("stdout") or r.get("stderr"))
    r = await run("grep -E '^Cap(Eff|Bnd)' /proc/self/status")
    caps = dict(line.split(":\t") for line in (r.get("stdout") or "").splitlines() if ":\t" in line)
    unprivileged = os.geteuid() != 0
    held_caps = caps.get("CapEff") == "0" * 16 and (
        unprivileged or caps.get("CapBnd") == "0" * 16)
    note("capabilities-left", held_caps, caps)

    # Survivors: each run starts an escape marked with a token of its own, then ends
    # normally or by its timeout; whatever is alive with the token afterwards escaped.
    scenarios = {
        "survivor-setsid-exit": ("setsid -f bash -c 'exec -a {m} sleep 1000'; echo ok", None),
        "survivor-setsid-timeout": ("setsid -f bash -c 'exec -a {m} sleep 1000'; sleep 30", 0.3),
        "survivor-double-fork": ("( ( exec -a {m} sleep 1000 & ) & ); echo ok", None),
        "survivor-daemon-nohup": ("nohup setsid bash -c 'exec -a {m} sleep 1000' "
                                  ">/dev/null 2>&1 & disown; sleep 30", 0.3),
    }
    for name, (template, timeout) in scenarios.items():
        survived = 0
        for i in range(repetitions):
            token = f"sbxmark{os.getpid()}x{name[9:]}x{i}"
            await run(template.format(m=token), timeout)
            time.sleep(0.02)
            alive = marked(token)
            survived += bool(alive)
            for pid in alive:
                os.kill(pid, signal.SIGKILL)
        note(name, survived == 0, f"{survived} of {repetitions} survived")

    # max_child_processes counts the command's processes only: 30 other processes of
    # ours run meanwhile, and a command limited to 20 still forks 5; 40 it cannot.
    others = [subprocess.Popen(["sleep", "120"]) for _ in range(30)]
    try:
        limited = ExecuteBashTool(workspace=ws, policy=BashToolPolicy(
            timeout_seconds=10, max_child_processes=20))  # (limits are read at init)
        r = await limited.run_async(args={"command": "for i in 1 2 3 4 5; do sleep 0.3 & done; "
                                       "wait; echo forked"}, tool_context=ctx())  # fmt: skip
        enforcement = (r.get("containment") or {}).get("max-child-processes", "")
        layers["max-child-processes"] = enforcement
        note("nproc-counts-own-only", "forked" in r.get("stdout", ""),
             f"{enforcement}; {r.get('stderr', '')[:200]}")
        r = await limited.run_async(args={"command": "for i in $(seq 40); do sleep 1 & done "
                                       "2>&1 | grep -c fork; wait"}, tool_context=ctx())  # fmt: skip
        failed = int((r.get("stdout") or "0").split()[0] or 0)
        note("nproc-bounds-command", failed > 0, f"{enforcement}; {failed} forks refused")
    finally:
        for other in others:
            other.kill()
            other.wait()

    # Descriptors the agent and its spawner hold per workspace (each reserves runs).
    from sandbox.bash.linux.spawner import Spawner

    def held() -> int:
        spawner = Spawner.shared().pid
        return len(os.listdir("/proc/self/fd")) + len(os.listdir(f"/proc/{spawner}/fd"))

    before = held()
    extra = 6
    for _ in range(extra):
        other_ws = Path(tempfile.mkdtemp(prefix="sandbox-matrix-ws-"))
        r = await ExecuteBashTool(workspace=other_ws, policy=BashToolPolicy()).run_async(
            args={"command": "true"}, tool_context=ctx())
        assert "error" not in r, r
        await asyncio.sleep(0.2)  # its reservation made
    per_workspace = (held() - before) / extra

    # A workspace every user may write (what `sandbox run` in /tmp sees): root drops to
    # nobody by default, which a rootless container's namespace may not map.
    shared_ws = Path(tempfile.mkdtemp(prefix="sandbox-matrix-shared-"))
    shared_ws.chmod(0o777)
    r = await ExecuteBashTool(workspace=shared_ws, policy=BashToolPolicy()).run_async(
        args={"command": "id -u"}, tool_context=ctx())
    shared_workspace_run = r.get("error") or f"ran as uid {r.get('stdout', '').strip()}"

    # confinement="required": runs, or refuses naming every missing layer; never ends us.
    strict = ExecuteBashTool(workspace=ws, policy=BashToolPolicy(confinement="required"))
    done = await strict.run_async(args={"command": "echo ran"}, tool_context=ctx())
    required = done.get("error") or done.get("stdout", "")
    from sandbox.bash import detect_protections

    doctor = detect_protections()
    victim.kill()
    victim.wait()
    print(json.dumps({"uid": os.geteuid(), "layers": layers, "probes": probes,
                      "required": str(required), "doctor": doctor.get("containment"),
                      "fds_per_workspace": per_workspace,
                      "shared_workspace_run": shared_workspace_run}))


if __name__ == "__main__":
    asyncio.run(main())
