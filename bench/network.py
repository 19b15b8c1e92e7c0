"""The egress proxy of network="allowlist" against a direct connection, on loopback.

    .venv/bin/python bench/network.py [--mib 200] [--small 100] [--streams 50]

1. Throughput: curl downloads --mib MiB from a local server, directly and through the
   proxy (HTTP CONNECT is not needed for plain http: curl sends an absolute-form GET),
   alternating, three rounds each. Goal: proxied ≥ 0.8x direct.
2. Time to first byte for --small small requests, each a new connection, direct and
   through the proxy (Python sockets, so curl's own start-up does not hide the cost).
   Goal: ≤ 1 ms added per connection (median).
3. The proxy's memory: RSS of this process (the proxy runs on a thread here, as in an
   agent) before and while --streams connections stream at once.

The server and the proxy run in this process's threads; curl is a separate process.
Every figure is measured in this one run, side by side.
"""

from __future__ import annotations

import argparse
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


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _curl_speed(url: str, env: dict[str, str] | None) -> float:
    args = ["curl", "-sS", "-o", "/dev/null", "-w", "%{speed_download}", url]
    out = subprocess.run(args, env={"PATH": "/usr/bin:/bin", **(env or {})}, check=True,
                         capture_output=True, text=True, timeout=300).stdout  # fmt: skip
    return float(out) / (1 << 20)


def _ttfb(port: int, proxy_port: int | None) -> float:
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", proxy_port or port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        target = f"http://bench.test:{port}/small" if proxy_port else "/small"
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: bench.test\r\n\r\n".encode())
        s.recv(1)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=200)
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:  # the server process: the listener is fd 3
        _server(args.mib << 20, socket.socket(fileno=args.serve))
        return

    listener = socket.create_server(("127.0.0.1", 0), backlog=512)
    port = listener.getsockname()[1]
    server = subprocess.Popen([sys.executable, __file__, "--mib", str(args.mib), "--serve",
                               str(listener.fileno())], pass_fds=[listener.fileno()])  # fmt: skip

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

    print(f"1. Download of {args.mib} MiB over loopback (curl, MiB/s; 3 rounds alternating)")
    direct, proxied = [], []
    for _ in range(3):
        direct.append(_curl_speed(f"http://127.0.0.1:{port}/big", None))
        proxied.append(_curl_speed(f"http://bench.test:{port}/big",
                                   {"http_proxy": env["http_proxy"]}))  # fmt: skip
    d, p = statistics.median(direct), statistics.median(proxied)
    print(f"   {'direct':<28}{d:10.0f} MiB/s")
    print(f"   {'through the proxy':<28}{p:10.0f} MiB/s")
    print(f"   ratio proxied/direct: {p / d:.2f}x  (goal >= 0.80x)\n")

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
    before = _rss_kib()
    clients = []
    for _ in range(args.streams):
        s = socket.create_connection(("127.0.0.1", proxy_port))
        s.sendall(f"GET http://bench.test:{port}/big HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        s.recv(65536)
        clients.append(s)
    time.sleep(1.0)  # every stream's buffers are full: the clients stopped reading
    during = _rss_kib()
    for s in clients:
        s.close()
    print(f"   RSS before {before / 1024:.1f} MiB, while streaming {during / 1024:.1f} MiB: "
          f"+{(during - before) / 1024:.1f} MiB ({(during - before) / args.streams:.0f} KiB "
          "per connection)")
    proxy.detach(att)
    proxy.stop()
    server.kill()
    server.wait()
    listener.close()


if __name__ == "__main__":
    main()
