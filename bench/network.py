"""The egress proxy of network="allowlist" against a direct connection, on loopback.

    .venv/bin/python bench/network.py [--mib 200] [--rounds 5] [--small 100] [--streams 50]

1. Throughput: curl downloads --mib MiB from a local server, directly and through the
   proxy (HTTP CONNECT is not needed for plain http: curl sends an absolute-form GET),
   alternating, --rounds rounds each; the same curl, the same server, the same URL
   path for both columns. Goal: proxied >= 0.8x direct (median of the rounds). Then
   the CPU each stage used per GiB (medians): the server, curl, the proxy's thread in
   this process (decisions) and the forwarding process (forwarder.py, the bytes).
   1b. The same, while this process's main thread runs Python (as an agent's does
   when it parses a model's answer): the proxy must not wait for this process's GIL.
2. Time to first byte for --small small requests, each a new connection, direct and
   through the proxy (Python sockets, so curl's own start-up does not hide the cost).
   Goal: <= 1 ms added per connection (median).
3. The proxy's memory: RSS of this process (the proxy's thread runs here, as in an
   agent) and of the forwarding process, before and while --streams connections
   stream at once (their clients stopped reading: every buffer is full).

The server is a process of its own (it shares no GIL with the proxy); curl is a
separate process. Every figure is measured in this one run, side by side; the load
average is printed before and after (the machine may be shared: compare columns, not
runs).
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from sandbox.bash.network import Allowlist, EgressProxy, proxy_environment

CHUNK = b"x" * (1 << 20)


def _server(total: int, listener: socket.socket) -> None:
    """An HTTP/1.1 server that answers every request with ``total`` bytes (or a few
    bytes for /small), one thread per connection. It runs in a process of its own
    (``--serve``), as a remote server would, so it shares no GIL with the proxy."""

    def handle(conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                data = conn.recv(65536)
                if not data:
                    return
                head += data
            size = 2 if b" /small " in head else total
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                         % size)
            left = size
            try:
                while left > 0:
                    n = min(left, len(CHUNK))
                    conn.sendall(CHUNK[:n])
                    left -= n
            except OSError:
                pass

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    serve()


def _rss_kib(pid: int | str = "self") -> int:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _cpu_seconds(path: str) -> float:
    """utime + stime of /proc/<pid>/stat or /proc/self/task/<tid>/stat."""
    try:
        fields = Path(path).read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _curl(url: str, env: dict[str, str] | None) -> tuple[float, float]:
    """MiB/s of one download, and curl's CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    args = ["curl", "-sS", "-o", "/dev/null", "-w", "%{speed_download}", url]
    out = subprocess.run(args, env={"PATH": "/usr/bin:/bin", **(env or {})}, check=True,
                         capture_output=True, text=True, timeout=300).stdout  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return float(out) / (1 << 20), cpu


class _Stages:
    """CPU seconds used by each stage during one download."""

    def __init__(self, server: int, proxy_thread: int | None, forwarder: int | None) -> None:
        self.paths = {"server": f"/proc/{server}/stat"}
        if proxy_thread is not None:
            self.paths["proxy thread"] = f"/proc/self/task/{proxy_thread}/stat"
        if forwarder is not None:
            self.paths["forwarder"] = f"/proc/{forwarder}/stat"

    def measure(self, url: str, env: dict[str, str] | None) -> tuple[float, dict[str, float]]:
        before = {k: _cpu_seconds(p) for k, p in self.paths.items()}
        speed, curl_cpu = _curl(url, env)
        cpu = {k: _cpu_seconds(p) - before[k] for k, p in self.paths.items()}
        cpu["curl"] = curl_cpu
        return speed, cpu


class _BusyAgent:
    """A thread of this process running Python (it lets go of the GIL only every
    switch interval), as an agent's thread does while it works."""

    def __enter__(self) -> None:
        self._stop = False
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        n = 0
        while not self._stop:
            n += 1

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        self._thread.join()


def _ttfb(port: int, proxy_port: int | None) -> float:
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", proxy_port or port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        target = f"http://bench.test:{port}/small" if proxy_port else "/small"
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: bench.test\r\n\r\n".encode())
        s.recv(1)
    return time.perf_counter() - start


def _throughput(title: str, args: argparse.Namespace, port: int, proxy_env: dict[str, str],
                stages: _Stages) -> None:  # fmt: skip
    print(title)
    runs: dict[str, list[tuple[float, dict[str, float]]]] = {"direct": [], "proxied": []}
    for _ in range(args.rounds):
        runs["direct"].append(stages.measure(f"http://127.0.0.1:{port}/big", None))
        runs["proxied"].append(stages.measure(f"http://bench.test:{port}/big", proxy_env))
    gib = args.mib / 1024
    names = ["server", "curl", "proxy thread", "forwarder"]
    print(f"   {'':<20}{'MiB/s':>8}   {'rounds':<32}CPU s/GiB: "
          + "  ".join(f"{n:>12}" for n in names))
    medians = {}
    for column, xs in runs.items():
        speeds = [x[0] for x in xs]
        medians[column] = statistics.median(speeds)
        cpu = [statistics.median(x[1].get(n, 0.0) for x in xs) / gib for n in names]
        rounds = " ".join(f"{v:.0f}" for v in speeds)
        label = "direct" if column == "direct" else "through the proxy"
        print(f"   {label:<20}{medians[column]:8.0f}   {rounds:<32}{'':10}"
              + "  ".join(f"{c:12.2f}" for c in cpu))
    ratio = medians["proxied"] / medians["direct"]
    totals = {c: statistics.median(sum(x[1].values()) for x in xs) / gib
              for c, xs in runs.items()}  # fmt: skip
    print(f"   ratio proxied/direct: {ratio:.2f}x  (goal >= 0.80x); CPU per GiB, all "
          f"stages: direct {totals['direct']:.2f} s, proxied {totals['proxied']:.2f} s "
          f"(direct/proxied {totals['direct'] / totals['proxied']:.2f}x: the ratio a "
          "saturated machine allows)\n")


def _measure(args: argparse.Namespace, port: int, server_pid: int) -> None:
    async def resolver(host: str, p: int) -> list[str]:
        return ["127.0.0.1"]

    proxy = EgressProxy(resolver=resolver).start()
    http_l = socket.create_server(("127.0.0.1", 0), backlog=512)
    socks_l = socket.create_server(("127.0.0.1", 0))
    env = proxy_environment(http_l.getsockname()[1], socks_l.getsockname()[1])
    att = proxy.attach([http_l, socks_l],
                       Allowlist.parse([f"bench.test:{port}", f"127.0.0.1:{port}"]),
                       command="bench")  # fmt: skip
    proxy_port = http_l.getsockname()[1]
    proxy_env = {"http_proxy": env["http_proxy"]}
    # One request first: the server process and the forwarding process are up and
    # warm before anything is timed.
    _curl(f"http://bench.test:{port}/small", proxy_env)
    thread = proxy._thread.native_id if proxy._thread is not None else None
    stages = _Stages(server_pid, thread, getattr(proxy, "forwarder_pid", None))

    _throughput(f"1. Download of {args.mib} MiB over loopback (curl; {args.rounds} rounds "
                "alternating)", args, port, proxy_env, stages)  # fmt: skip
    with _BusyAgent():
        _throughput("1b. The same while a thread of this process (the agent) runs Python",
                    args, port, proxy_env, stages)  # fmt: skip

    print(f"2. Time to first byte, {args.small} new connections each (ms)")
    td, tp = [], []
    for _ in range(args.small):
        td.append(_ttfb(port, None))
        tp.append(_ttfb(port, proxy_port))
    md, mp = statistics.median(td) * 1e3, statistics.median(tp) * 1e3
    print(f"   {'':<28}{'median':>10}{'p90':>10}")
    for name, xs in (("direct", td), ("through the proxy", tp)):
        q = statistics.quantiles(xs, n=10)
        print(f"   {name:<28}{statistics.median(xs) * 1e3:10.3f}{q[8] * 1e3:10.3f}")
    print(f"   added per connection (median): {mp - md:.3f} ms  (goal <= 1 ms)\n")

    print(f"3. Proxy memory while {args.streams} connections stream")
    forwarder = getattr(proxy, "forwarder_pid", None) or 0
    before, fbefore = _rss_kib(), _rss_kib(forwarder)
    clients = []
    for _ in range(args.streams):
        s = socket.create_connection(("127.0.0.1", proxy_port))
        s.sendall(f"GET http://bench.test:{port}/big HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        s.recv(65536)
        clients.append(s)
    time.sleep(1.0)  # every stream's buffers are full: the clients stopped reading
    during, fduring = _rss_kib(), _rss_kib(forwarder)
    for s in clients:
        s.close()
    for name, b, d in (("this process (the agent)", before, during),
                       ("the forwarding process", fbefore, fduring)):  # fmt: skip
        print(f"   {name:<26} RSS before {b / 1024:5.1f} MiB, while streaming "
              f"{d / 1024:5.1f} MiB: +{(d - b) / 1024:.1f} MiB "
              f"({(d - b) / args.streams:.0f} KiB per connection)")
    proxy.detach(att)
    proxy.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:  # the server process: the listener is fd 3
        _server(args.mib << 20, socket.socket(fileno=args.serve))
        return

    print("load average before: " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + "\n")
    listener = socket.create_server(("127.0.0.1", 0), backlog=512)
    port = listener.getsockname()[1]
    server = subprocess.Popen([sys.executable, __file__, "--mib", str(args.mib), "--serve",
                               str(listener.fileno())], pass_fds=[listener.fileno()])  # fmt: skip

    try:
        _measure(args, port, server.pid)
    finally:  # the server never outlives the bench (an exception, a closed stdout)
        server.kill()
        server.wait()
        listener.close()
    print("\nload average after: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
