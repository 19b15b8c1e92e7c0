"""The egress proxy's data plane (sandbox/bash/network/forwarder.py): the bytes of a
decided connection move in a process of its own, which holds nothing once the
connection, the command or the agent is gone, and whose death cuts what it carried
without taking the proxy down."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.bash.network import Allowlist, EgressProxy
from tests.paths import REPO

pytestmark = pytest.mark.skipif(not hasattr(os, "splice"), reason="Linux only (splice)")


@contextlib.contextmanager
def _endless_server() -> Iterator[int]:
    """A server that sends bytes until the client goes."""
    server = socket.create_server(("127.0.0.1", 0), backlog=64)

    def handle(conn: socket.socket) -> None:
        chunk = b"x" * (256 << 10)
        with conn, contextlib.suppress(OSError):
            while True:
                conn.sendall(chunk)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


@contextlib.contextmanager
def _proxied(port: int) -> Iterator[tuple[EgressProxy, object, int]]:
    async def resolver(host: str, p: int) -> list[str]:
        return ["127.0.0.1"]

    proxy = EgressProxy(resolver=resolver).start()
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    lport = listener.getsockname()[1]
    att = proxy.attach([listener], Allowlist.parse([f"far.test:{port}", f"127.0.0.1:{port}"]),
                       command="test")  # fmt: skip
    try:
        yield proxy, att, lport
    finally:
        proxy.detach(att)
        proxy.stop()


def _tunnel(lport: int, port: int) -> socket.socket:
    c = socket.create_connection(("127.0.0.1", lport), timeout=10)
    c.sendall(b"CONNECT far.test:%d HTTP/1.1\r\n\r\n" % port)
    reply = b""
    while b"\r\n\r\n" not in reply:
        data = c.recv(1)
        assert data, reply
        reply += data
    assert reply.startswith(b"HTTP/1.1 200"), reply
    return c


def _inode_of_peer(client: socket.socket) -> int:
    """The inode of the proxy's socket at the other end of ``client``'s connection."""
    cport = client.getsockname()[1]
    sport = client.getpeername()[1]
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1], fields[2]
        if int(local.split(":")[1], 16) == sport and int(remote.split(":")[1], 16) == cport:
            return int(fields[9])
    raise AssertionError("the proxy's end of the connection is not in /proc/net/tcp")


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    return inodes


def _read_until_end(c: socket.socket, seconds: float) -> bool:
    """True when the connection ended (EOF or reset) within ``seconds``."""
    c.settimeout(seconds)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            if not c.recv(1 << 20):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return False


def test_a_decided_connection_streams_through_the_forwarding_process() -> None:
    """The proxy's end of a CONNECT tunnel is held by the forwarding process while
    bytes flow (the agent's thread no longer moves them), and let go of when the
    command is detached: the client sees the end, the process holds nothing of it."""
    with _endless_server() as port, _proxied(port) as (proxy, att, lport):
        pid = proxy.forwarder_pid
        assert pid is not None
        c = _tunnel(lport, port)
        got = 0
        while got < 8 << 20:
            data = c.recv(1 << 20)
            assert data
            got += len(data)
        inode = _inode_of_peer(c)
        assert inode in _socket_inodes(pid)
        proxy.detach(att)  # type: ignore[arg-type]
        assert _read_until_end(c, 10), "detach left the connection open"
        deadline = time.monotonic() + 10
        while inode in _socket_inodes(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert inode not in _socket_inodes(pid)
        c.close()


def test_a_dead_forwarding_process_cuts_its_connections_and_the_proxy_carries_on() -> None:
    """SIGKILL to the forwarding process: the tunnel it carried ends (the client is
    not left hanging), and the next connection is served by the proxy itself."""
    with _endless_server() as port, _proxied(port) as (proxy, _att, lport):
        pid = proxy.forwarder_pid
        assert pid is not None
        c = _tunnel(lport, port)
        assert c.recv(1 << 20)
        os.kill(pid, signal.SIGKILL)
        assert _read_until_end(c, 10), "the connection outlived the process that carried it"
        c.close()
        deadline = time.monotonic() + 10
        while proxy.forwarder_pid is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proxy.forwarder_pid is None
        c = _tunnel(lport, port)
        got = 0
        while got < 4 << 20:
            data = c.recv(1 << 20)
            assert data
            got += len(data)
        c.close()


_AGENT = """
import socket, sys, time
from sandbox.bash.network import Allowlist, EgressProxy
async def resolve(host, p):
    return ["127.0.0.1"]
port = int(sys.argv[1])
proxy = EgressProxy(resolver=resolve).start()
listener = socket.create_server(("127.0.0.1", 0))
proxy.attach([listener], Allowlist.parse([f"far.test:{port}", f"127.0.0.1:{port}"]))
print(proxy.forwarder_pid, listener.getsockname()[1], flush=True)
time.sleep(600)
"""


def test_the_forwarding_process_goes_with_the_agent(tmp_path: Path) -> None:
    """An agent killed with SIGKILL mid-download: its forwarding process shuts down
    the connections it carried and exits (nothing streams on for a dead agent)."""
    script = tmp_path / "agent.py"
    script.write_text(_AGENT)
    repo = REPO
    with _endless_server() as port:
        agent = subprocess.Popen([sys.executable, str(script), str(port)], text=True,
                                 stdout=subprocess.PIPE,
                                 env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                     [str(repo), os.environ.get("PYTHONPATH", "")])})  # fmt: skip
        try:
            assert agent.stdout is not None
            pid_text, lport_text = agent.stdout.readline().split()
            pid = int(pid_text)
            c = _tunnel(int(lport_text), port)
            assert c.recv(1 << 20)
            agent.kill()
            agent.wait(10)
            assert _read_until_end(c, 10), "the tunnel outlived the agent"
            c.close()
            deadline = time.monotonic() + 10
            while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)  # not ours: its parent is gone
                time.sleep(0.05)
            state = ""
            with contextlib.suppress(OSError):
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            assert state in ("", "Z"), f"the forwarding process {pid} is still running"
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.wait()


_STALLED_CLIENT = """
import os, socket, sys, threading, time
from sandbox.bash.network import Allowlist, EgressProxy
server = socket.create_server(("127.0.0.1", 0))
port = server.getsockname()[1]
def feed(conn):
    try:
        while True:
            conn.sendall(b"x" * 65536)
    except OSError:
        pass
def accept():
    while True:
        conn = server.accept()[0]
        threading.Thread(target=feed, args=(conn,), daemon=True).start()
threading.Thread(target=accept, daemon=True).start()
async def resolve(host, p):
    return ["127.0.0.1"]
# A pipe larger than an unprivileged user may have (pipe-max-size): the pipe keeps its
# default size, as every new pipe does past pipe-user-pages-soft.
proxy = EgressProxy(resolver=resolve, chunk_bytes=4 << 20).start()
listener = socket.create_server(("127.0.0.1", 0))
att = proxy.attach([listener], Allowlist.parse([f"far.test:{port}", f"127.0.0.1:{port}"]))
def cpu(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
for case in ("forwarder", "proxy thread"):
    if case == "proxy thread":
        os.kill(proxy.forwarder_pid, 9)
        while proxy.forwarder_pid is not None:
            time.sleep(0.05)
    c = socket.create_connection(listener.getsockname())
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    c.sendall(f"CONNECT far.test:{port} HTTP/1.1\\r\\n\\r\\n".encode())
    assert c.recv(65536)
    time.sleep(1)  # every buffer on the way fills up: the client reads no more
    pid = proxy.forwarder_pid or os.getpid()
    before = cpu(pid)
    time.sleep(2)
    print(case, round(cpu(pid) - before, 2), flush=True)
    c.close()
"""


def test_a_pipe_smaller_than_asked_for_does_not_spin() -> None:
    """An unprivileged agent's pipes stay at their default size past pipe-max-size or
    pipe-user-pages-soft (64 MiB of pipes per user: 32 streaming connections). A
    direction that took the pipe for the size it asked for kept waiting for its
    readable source with the pipe full, woke at once, moved nothing, and spun at 100%
    CPU while its client did not read (in the forwarding process, and in the proxy's
    thread, holding the agent's GIL)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("useradd") is None:
        pytest.skip("needs root to make a throwaway user (setpriv, useradd)")
    python = "/usr/bin/python3"
    if not os.path.exists(python) or subprocess.run(
            [python, "-c", f"import sys; assert sys.version_info[:2] == {sys.version_info[:2]}"]
    ).returncode:  # fmt: skip
        pytest.skip("no Python of this version that every user can run")
    repo = REPO
    site_packages = [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]
    name = f"sbxpipe{os.getpid()}"
    subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", name], check=True,
                   capture_output=True)  # fmt: skip
    try:
        env = {"PATH": "/usr/bin:/bin", "HOME": "/",
               "PYTHONPATH": ":".join([str(repo), *site_packages])}
        r = subprocess.run(["setpriv", "--reuid", name, "--regid", name, "--clear-groups",
                            "env", "-i", *(f"{k}={v}" for k, v in env.items()), python,
                            "-c", _STALLED_CLIENT], capture_output=True, text=True,
                           timeout=60, cwd="/")  # fmt: skip
        assert r.returncode == 0, r.stderr[-3000:]
        used = dict(line.rsplit(" ", 1) for line in r.stdout.splitlines())
        assert set(used) == {"forwarder", "proxy thread"}, r.stdout
        for where, seconds in used.items():
            assert float(seconds) < 0.1, f"{where}: {seconds} s of CPU in 2 s, moving nothing"
    finally:
        subprocess.run(["userdel", "-f", name], capture_output=True, check=False)
