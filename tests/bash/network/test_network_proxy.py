"""The egress proxy of network="allowlist", with real clients and real servers on
127.0.0.1: curl, Python's urllib, git over http, pip from a local simple index; plain
HTTP and HTTPS (a throwaway CA the clients trust, made by trustme). Names are mapped to
addresses by the proxy's resolver hook, never by /etc/hosts."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.bash.network import Allowlist, EgressProxy, parse_entry, proxy_environment
from sandbox.bash.network.allowlist import normalize_host, special_address
from sandbox.errors import ConfigurationError
from tests.paths import REPO

pytestmark = pytest.mark.timeout(60)


# --------------------------------------------------------------------------- entries


@pytest.mark.parametrize(
    ("entry", "host", "port", "wildcard", "ip"),
    [
        ("pypi.org", "pypi.org", None, False, False),
        ("PyPI.org.", "pypi.org", None, False, False),
        ("*.pythonhosted.org", "pythonhosted.org", None, True, False),
        ("github.com:443", "github.com", 443, False, False),
        ("localhost:8080", "localhost", 8080, False, False),
        ("127.0.0.1", "127.0.0.1", None, False, True),
        ("[::1]:8080", "::1", 8080, False, True),
        ("bücher.example", "xn--bcher-kva.example", None, False, False),
    ],
)
def test_entries_parse(entry: str, host: str, port: int | None, wildcard: bool, ip: bool) -> None:
    rule = parse_entry(entry)
    assert (rule.host, rule.port, rule.wildcard, rule.ip) == (host, port, wildcard, ip)


@pytest.mark.parametrize(
    "entry",
    ["", " pypi.org", "https://pypi.org", "pypi.org/simple", "*", "*.com.*", "a.*.b",
     "pypi.org:0", "pypi.org:65536", "pypi.org:http", "::1", "::1:80", "*.127.0.0.1",
     "user@host", "-bad.example", "a..b", "0x7f.1", "1.2.3", 42, None],
)  # fmt: skip
def test_bad_entries_name_themselves(entry: object) -> None:
    with pytest.raises(ConfigurationError, match="allowed_domains entry"):
        parse_entry(entry)


def test_matching_and_default_ports() -> None:
    allow = Allowlist.parse(["pypi.org", "*.pythonhosted.org", "github.com:22"])
    assert allow.match("pypi.org", 443) and allow.match("pypi.org", 80)
    assert allow.match("pypi.org", 8080) is None
    assert allow.match("files.pythonhosted.org", 443)
    assert allow.match("a.b.pythonhosted.org", 443)
    assert allow.match("pythonhosted.org", 443) is None  # the wildcard is subdomains only
    assert allow.match("evilpythonhosted.org", 443) is None
    assert allow.match("github.com", 22) and allow.match("github.com", 443) is None


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "0.0.0.0",
     "100.100.100.200", "::1", "fd00:ec2::254", "fe80::1", "::ffff:127.0.0.1", "224.0.0.1"],
)  # fmt: skip
def test_special_addresses(address: str) -> None:
    assert special_address(address) is not None


def test_public_addresses() -> None:
    assert special_address("151.101.0.223") is None
    assert special_address("2a04:4e42::223") is None


# --------------------------------------------------------------------------- servers


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def _http_server(root: Path, tls: ssl.SSLContext | None = None) -> Iterator[int]:
    handler = lambda *a, **k: _Quiet(*a, directory=str(root), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    root = tmp_path / "site"
    root.mkdir()
    (root / "hello.txt").write_text("hello from the listed host\n")
    with _http_server(root) as port:
        yield root, port


@contextlib.contextmanager
def _proxy(entries: list[str], names: dict[str, list[str]], **kw: object
           ) -> Iterator[tuple[EgressProxy, dict[str, str], object]]:  # fmt: skip
    async def resolver(host: str, port: int) -> list[str]:
        if host not in names:
            raise OSError(f"test resolver: no address for {host}")
        return names[host]

    proxy = EgressProxy(resolver=resolver, head_timeout=2.0).start()
    http_l = socket.create_server(("127.0.0.1", 0))
    socks_l = socket.create_server(("127.0.0.1", 0))
    env = proxy_environment(http_l.getsockname()[1], socks_l.getsockname()[1])
    att = proxy.attach([http_l, socks_l], Allowlist.parse(entries), command="test",
                       **kw)  # type: ignore[arg-type]  # fmt: skip
    try:
        yield proxy, env, att
    finally:
        proxy.detach(att)
        proxy.stop()


def _curl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    full = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), **env}
    return subprocess.run(["curl", "-sS", "--max-time", "10", *args], env=full,
                          capture_output=True, text=True, timeout=30)  # fmt: skip


needs_curl = pytest.mark.needs_program("curl")


@needs_curl
def test_curl_listed_name_is_served(site: tuple[Path, int]) -> None:
    _, port = site
    with _proxy([f"pkg.test:{port}", f"127.0.0.1:{port}"], {"pkg.test": ["127.0.0.1"]}) as (
        proxy, env, att,
    ):  # fmt: skip
        r = _curl(env, f"http://pkg.test:{port}/hello.txt")
        assert r.stdout == "hello from the listed host\n", r.stderr
        r = _curl({**env, "HTTP_PROXY": "", "http_proxy": ""},
                  f"http://pkg.test:{port}/hello.txt")  # fmt: skip
        assert r.stdout == "hello from the listed host\n", r.stderr  # through SOCKS5 (ALL_PROXY)
        assert proxy.detach(att)["allowed"] == [
            {"destination": f"pkg.test:{port}", "connections": 2}
        ]


@needs_curl
def test_unlisted_name_and_raw_ip_are_refused(site: tuple[Path, int]) -> None:
    _, port = site
    with _proxy([f"pkg.test:{port}"], {"pkg.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]}
                ) as (proxy, env, att):  # fmt: skip
        r = _curl(env, "-o", "/dev/null", "-w", "%{http_code}", f"http://other.test:{port}/hello.txt")
        assert r.stdout == "403"
        r = _curl(env, "-o", "/dev/null", "-w", "%{http_code}", f"http://127.0.0.1:{port}/hello.txt")
        assert r.stdout == "403"
        # pkg.test is listed, but it resolves to loopback and no entry names 127.0.0.1:
        # a listed name rebound to a private address reaches nothing.
        r = _curl(env, "-o", "/dev/null", "-w", "%{http_code}", f"http://pkg.test:{port}/hello.txt")
        assert r.stdout == "403"
        report = proxy.detach(att)
        assert report["allowed"] == []
        denied = {d["destination"]: d for d in report["denied"]}
        assert "not in allowed_domains" in denied[f"other.test:{port}"]["reason"]
        assert "127.0.0.1 (loopback)" in denied[f"pkg.test:{port}"]["reason"]


@needs_curl
def test_localhost_entry_names_loopback(site: tuple[Path, int]) -> None:
    _, port = site
    with _proxy([f"localhost:{port}"], {"localhost": ["127.0.0.1"]}) as (_p, env, _a):
        assert _curl(env, f"http://localhost:{port}/hello.txt").stdout.startswith("hello")
        assert _curl(env, "-o", "/dev/null", "-w", "%{http_code}",
                     f"http://localhost:{port + 1 if port < 65535 else 1}/x").stdout == "403"


@needs_curl
def test_https_through_connect_and_socks(tmp_path: Path) -> None:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("secure.test")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(ctx)
    root = tmp_path / "s"
    root.mkdir()
    (root / "x.txt").write_text("over tls\n")
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    with _http_server(root, ctx) as port, _proxy(
        [f"secure.test:{port}", f"127.0.0.1:{port}"], {"secure.test": ["127.0.0.1"]}
    ) as (proxy, env, att):
        r = _curl(env, "--cacert", str(ca_file), f"https://secure.test:{port}/x.txt")
        assert r.stdout == "over tls\n", r.stderr
        socks_only = {**env, "HTTPS_PROXY": "", "https_proxy": ""}
        r = _curl(socks_only, "--cacert", str(ca_file), f"https://secure.test:{port}/x.txt")
        assert r.stdout == "over tls\n", r.stderr
        assert proxy.detach(att)["allowed"] == [
            {"destination": f"secure.test:{port}", "connections": 2}
        ]


def test_urllib_through_the_proxy(site: tuple[Path, int]) -> None:
    _, port = site
    with _proxy([f"pkg.test:{port}", f"127.0.0.1:{port}"], {"pkg.test": ["127.0.0.1"]}) as (
        _p, env, _a,
    ):  # fmt: skip
        opener = urllib.request.build_opener(urllib.request.ProxyHandler(
            {"http": env["HTTP_PROXY"], "https": env["HTTPS_PROXY"]}))  # fmt: skip
        with opener.open(f"http://pkg.test:{port}/hello.txt", timeout=10) as r:
            assert r.read() == b"hello from the listed host\n"
        with pytest.raises(urllib.error.HTTPError) as info:
            opener.open(f"http://nope.test:{port}/hello.txt", timeout=10)
        assert info.value.code == 403


@pytest.mark.needs_program("git")
def test_git_clone_over_http(tmp_path: Path) -> None:
    git = shutil.which("git")
    assert git is not None
    work = tmp_path / "src"
    subprocess.run([git, "init", "-q", str(work)], check=True)
    (work / "f").write_text("x\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run([git, "-C", str(work), "add", "f"], check=True, env=env)
    subprocess.run([git, "-C", str(work), "commit", "-qm", "one"], check=True, env=env)
    served = tmp_path / "served"
    served.mkdir()
    subprocess.run([git, "clone", "-q", "--bare", str(work), str(served / "repo.git")],
                   check=True, env=env)  # fmt: skip
    subprocess.run([git, "-C", str(served / "repo.git"), "update-server-info"], check=True)
    with _http_server(served) as port, _proxy(
        [f"git.test:{port}", f"127.0.0.1:{port}"], {"git.test": ["127.0.0.1"]}
    ) as (_p, penv, _a):
        r = subprocess.run([git, "clone", "-q", f"http://git.test:{port}/repo.git",
                            str(tmp_path / "clone")], env={**env, **penv},
                           capture_output=True, text=True, timeout=60)  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert (tmp_path / "clone" / "f").read_text() == "x\n"
        r = subprocess.run([git, "clone", "-q", f"http://nogit.test:{port}/repo.git",
                            str(tmp_path / "clone2")], env={**env, **penv},
                           capture_output=True, text=True, timeout=60)  # fmt: skip
        assert r.returncode != 0 and "403" in r.stderr


def _wheel(directory: Path) -> str:
    """A minimal pure-Python wheel of 'tinypkg' (no build backend needed)."""
    import base64
    import hashlib
    import zipfile

    name = "tinypkg-1.0-py3-none-any.whl"
    files = {
        "tinypkg/__init__.py": b"VALUE = 7\n",
        "tinypkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
        "tinypkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append("tinypkg-1.0.dist-info/RECORD,,")
    with zipfile.ZipFile(directory / name, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
        z.writestr("tinypkg-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return name


def test_pip_install_from_a_local_index(tmp_path: Path) -> None:
    wheels = tmp_path / "index" / "tinypkg"
    wheels.mkdir(parents=True)
    wheel = _wheel(wheels)
    (wheels / "index.html").write_text(f'<a href="{wheel}">{wheel}</a>\n')
    target = tmp_path / "target"
    with _http_server(tmp_path / "index") as port, _proxy(
        [f"index.test:{port}", f"127.0.0.1:{port}"], {"index.test": ["127.0.0.1"]}
    ) as (_p, penv, _a):
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), **penv}
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-cache-dir",
                            "--disable-pip-version-check", "--target", str(target),
                            "--index-url", f"http://index.test:{port}/",
                            "--trusted-host", "index.test", "tinypkg"],
                           env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert (target / "tinypkg" / "__init__.py").exists()


# --------------------------------------------------------------------------- asking


@needs_curl
def test_unlisted_name_is_asked_and_the_answer_is_kept_per_question(
    site: tuple[Path, int],
) -> None:
    _, port = site
    asked: list[tuple[str, int]] = []

    async def ask(host: str, port_: int) -> bool:
        asked.append((host, port_))
        await asyncio.sleep(0.2)  # concurrent connections wait for the same answer
        return host == "yes.test"

    async def main() -> None:
        with _proxy([f"127.0.0.1:{port}"],
                    {"yes.test": ["127.0.0.1"], "no.test": ["127.0.0.1"]}, ask=ask) as (
            proxy, env, att,
        ):  # fmt: skip
            def run(url: str) -> str:
                return _curl(env, "-o", "/dev/null", "-w", "%{http_code}", url).stdout

            results = await asyncio.gather(
                asyncio.to_thread(run, f"http://yes.test:{port}/hello.txt"),
                asyncio.to_thread(run, f"http://yes.test:{port}/hello.txt"),
                asyncio.to_thread(run, f"http://no.test:{port}/hello.txt"),
            )
            assert results == ["200", "200", "403"]
            report = proxy.detach(att)
            assert report["allowed"] == [{"destination": f"yes.test:{port}", "connections": 2}]

    asyncio.run(main())
    assert sorted(set(asked)) == [("no.test", port), ("yes.test", port)]
    assert asked.count(("yes.test", port)) <= 2


# --------------------------------------------------------------------------- bad input


def _raw(port: int, data: bytes, *, read: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        if not read:
            return b""
        chunks = []
        with contextlib.suppress(OSError):
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)


def test_oversized_head_half_open_connect_and_socks_udp(site: tuple[Path, int]) -> None:
    _, port = site
    with _proxy([f"pkg.test:{port}", f"127.0.0.1:{port}"], {"pkg.test": ["127.0.0.1"]}) as (
        _p, env, _a,
    ):  # fmt: skip
        hport = int(env["HTTP_PROXY"].rsplit(":", 1)[1])
        sport = int(env["ALL_PROXY"].rsplit(":", 1)[1])
        huge = b"GET http://pkg.test/ HTTP/1.1\r\nX: " + b"a" * (64 << 10) + b"\r\n\r\n"
        assert _raw(hport, huge).startswith(b"HTTP/1.1 431")
        start = time.monotonic()
        assert _raw(hport, b"CONNECT pkg.test:%d HTTP/1.1\r\n" % port).startswith(b"HTTP/1.1 408")
        assert time.monotonic() - start < 8
        assert _raw(hport, b"GET /hello.txt HTTP/1.1\r\nHost: pkg.test\r\n\r\n").startswith(
            b"HTTP/1.1 400")  # fmt: skip
        assert _raw(hport, b"\x00\xff garbage\r\n\r\n").startswith(b"HTTP/1.1 400")
        # SOCKS5 UDP ASSOCIATE (3) and BIND (2): command not supported.
        for cmd in (2, 3):
            reply = _raw(sport, b"\x05\x01\x00" + bytes([5, cmd, 0, 1, 127, 0, 0, 1, 0, 53]))
            assert reply[:2] == b"\x05\x00" and reply[2:4] == b"\x05\x07"
        # And the proxy still serves.
        assert _curl(env, f"http://pkg.test:{port}/hello.txt").stdout.startswith("hello")


def test_a_thousand_connections_at_once(site: tuple[Path, int]) -> None:
    _, port = site
    with _proxy([f"pkg.test:{port}", f"127.0.0.1:{port}"], {"pkg.test": ["127.0.0.1"]}) as (
        _p, env, _a,
    ):  # fmt: skip
        hport = int(env["HTTP_PROXY"].rsplit(":", 1)[1])
        socks: list[socket.socket] = []
        try:
            for _ in range(1000):
                with contextlib.suppress(OSError):
                    s = socket.socket()
                    s.setblocking(False)
                    with contextlib.suppress(BlockingIOError):
                        s.connect(("127.0.0.1", hport))
                    socks.append(s)
            fds_before = len(os.listdir("/proc/self/fd"))
            assert fds_before < 1000 + 400  # the proxy holds a bounded number of them
        finally:
            for s in socks:
                s.close()
        # Served again once they are gone.
        deadline = time.monotonic() + 10
        while True:
            r = _curl(env, f"http://pkg.test:{port}/hello.txt")
            if r.stdout.startswith("hello") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert r.stdout.startswith("hello"), r.stderr



_FD_STARVED_AGENT = """
import os, resource, socket, sys, threading, time
from sandbox.bash.network import Allowlist, EgressProxy
resource.setrlimit(resource.RLIMIT_NOFILE, (200, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
server = socket.create_server(("127.0.0.1", 0), backlog=512)
port = server.getsockname()[1]
def hold(conn):
    while conn.recv(65536):
        pass
    conn.close()
def accept():
    while True:
        try:
            conn = server.accept()[0]
        except OSError:
            time.sleep(0.01)
            continue
        threading.Thread(target=hold, args=(conn,), daemon=True).start()
threading.Thread(target=accept, daemon=True).start()
async def resolve(host, p):
    return ["127.0.0.1"]
proxy = EgressProxy(resolver=resolve).start()
listener = socket.create_server(("127.0.0.1", 0), backlog=512)
lport = listener.getsockname()[1]
att = proxy.attach([listener], Allowlist.parse([f"pkg.test:{port}", f"127.0.0.1:{port}"]))
clients, peak = [], 0
for _ in range(60):
    c = socket.create_connection(("127.0.0.1", lport))
    c.sendall(f"CONNECT pkg.test:{port} HTTP/1.1\\r\\n\\r\\n".encode())
    clients.append(c)
deadline = time.monotonic() + 3
while time.monotonic() < deadline:
    peak = max(peak, len(os.listdir("/proc/self/fd")))
    time.sleep(0.05)
for c in clients:
    c.close()
time.sleep(0.5)
c = socket.create_connection(("127.0.0.1", lport), timeout=5)
c.sendall(f"CONNECT pkg.test:{port} HTTP/1.1\\r\\n\\r\\n".encode())
print(c.recv(64).decode().splitlines()[0], peak, proxy.max_connections, flush=True)
"""


def test_the_proxy_keeps_within_the_agents_descriptor_limit(tmp_path: Path) -> None:
    """Connections held open through the proxy never take the agent's descriptors
    (RLIMIT_NOFILE soft 200 here, 7 per connection): past the proxy's share clients
    wait in the backlog, the agent keeps descriptors of its own, and a listener whose
    accept failed keeps being served."""
    script = tmp_path / "starved.py"
    script.write_text(_FD_STARVED_AGENT)
    repo = REPO
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=40, env={**os.environ, "PYTHONPATH": str(repo)})  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Connection established" in r.stdout, (r.stdout, r.stderr[-3000:])
    peak, limit = r.stdout.split()[-2:]
    assert "Too many open files" not in r.stderr, r.stderr[-3000:]
    assert int(peak) < 200 and int(limit) <= 200 // 2 // 7, r.stdout


_OWN_ADDRESS = """
import socket, subprocess, sys, threading
from sandbox.bash.network import Allowlist, EgressProxy
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
# A public address of this (namespaced) machine, as a server's public IP on its NIC.
subprocess.run(["ip", "addr", "add", "11.22.33.44/32", "dev", "lo"], check=True)
server = socket.create_server(("0.0.0.0", 0))  # a host service on every address
port = server.getsockname()[1]
def serve():
    while True:
        c, _ = server.accept()
        c.sendall(b"SECRET of the host\\n")
        c.close()
threading.Thread(target=serve, daemon=True).start()
async def resolve(host, p):
    return ["11.22.33.44"]
proxy = EgressProxy(resolver=resolve).start()
for entries in ([f"pub.test:{port}"], [f"pub.test:{port}", f"11.22.33.44:{port}"]):
    listener = socket.create_server(("127.0.0.1", 0))
    att = proxy.attach([listener], Allowlist.parse(entries))
    c = socket.create_connection(listener.getsockname(), timeout=5)
    c.sendall(f"CONNECT pub.test:{port} HTTP/1.1\\r\\n\\r\\n".encode())
    data = b""
    while b"\\n" not in data.partition(b"\\r\\n\\r\\n")[2] and b"Connection: close" not in data:
        chunk = c.recv(4096)
        if not chunk:
            break
        data += chunk
    print(repr(data.decode()), repr(proxy.detach(att)["denied"]), flush=True)
"""


@pytest.mark.needs_user_net_namespace
def test_a_listed_name_resolving_to_an_address_of_this_machine_reaches_nothing(
    tmp_path: Path,
) -> None:
    """A public address can be the machine's own (its NIC's): connecting there reaches
    every host service listening on 0.0.0.0, as 127.0.0.1 would. A listed (or asked
    for) name that resolves to it is refused, unless an entry names the address."""
    script = tmp_path / "own.py"
    script.write_text(_OWN_ADDRESS)
    repo = REPO
    r = subprocess.run(["unshare", "-Urn", sys.executable, str(script)], capture_output=True,
                       text=True, timeout=40, env={**os.environ, "PYTHONPATH": str(repo)})  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    refused, named = r.stdout.splitlines()
    assert "SECRET" not in refused and "403 Forbidden" in refused, refused
    assert "11.22.33.44 (an address of this machine)" in refused, refused
    assert "SECRET of the host" in named, named  # an entry that names the address


def test_a_dripping_socks_handshake_is_cut_at_the_head_timeout(site: tuple[Path, int]) -> None:
    """A SOCKS5 client sending its handshake a byte at a time, each just inside a
    read's timeout, is cut when the whole handshake's time is up (as an HTTP head is)."""
    _, port = site
    with _proxy([f"pkg.test:{port}"], {"pkg.test": ["127.0.0.1"]}) as (proxy, env, _a):
        proxy.head_timeout = 1.0
        sport = int(env["ALL_PROXY"].rsplit(":", 1)[1])
        handshake = b"\x05\x01\x00\x05\x01\x00\x03\x08pkg.test" + port.to_bytes(2, "big")
        with socket.create_connection(("127.0.0.1", sport), timeout=5) as c:
            start = time.monotonic()
            closed_at = None
            for byte in handshake:
                try:
                    c.sendall(bytes([byte]))
                except OSError:
                    closed_at = time.monotonic()
                    break
                time.sleep(0.4)
                c.setblocking(False)
                try:
                    if c.recv(64) == b"":
                        closed_at = time.monotonic()
                        break
                except BlockingIOError:
                    pass
                finally:
                    c.setblocking(True)
            assert closed_at is not None and closed_at - start < 3, "the drip was served"


def test_a_command_cycling_through_names_keeps_its_report_bounded(
    site: tuple[Path, int],
) -> None:
    """Each refused name was kept in the agent's memory and listed in the result: a
    command cycling through x1.test, x2.test... made ~1,700 a second (10 MB of result
    in 10 s). Past the first 100 destinations of a kind, they are counted together."""
    _, port = site
    with _proxy([f"pkg.test:{port}"], {}) as (proxy, env, att):
        hport = int(env["HTTP_PROXY"].rsplit(":", 1)[1])
        for i in range(150):
            assert _raw(hport, b"CONNECT x%d.test:1 HTTP/1.1\r\n\r\n" % i).startswith(
                b"HTTP/1.1 403")  # fmt: skip
        for _ in range(3):
            _raw(hport, b"CONNECT x1.test:1 HTTP/1.1\r\n\r\n")
        denied = proxy.detach(att)["denied"]
    assert len(denied) == 101
    assert {"destination": "x1.test:1", "connections": 4,
            "reason": "x1.test:1 is not in allowed_domains"} in denied  # fmt: skip
    assert denied[-1]["destination"] == "(other destinations)"
    assert denied[-1]["connections"] == 50


def test_a_command_cycling_through_names_is_asked_a_bounded_number_of_times(
    site: tuple[Path, int],
) -> None:
    """A command cycling through unlisted names put a question to the human for each
    (~700 a second, each a call record in the store). Past max_questions_per_command
    distinct names, the rest are refused without asking; a name asked before is still
    answered."""
    _, port = site
    asked: list[str] = []

    async def ask(host: str, port_: int) -> bool:
        asked.append(host)
        return False

    async def main() -> dict[str, Any]:
        with _proxy([f"pkg.test:{port}"], {}, ask=ask) as (proxy, env, att):
            hport = int(env["HTTP_PROXY"].rsplit(":", 1)[1])
            for i in [*range(30), 0]:
                raw = b"CONNECT x%d.test:1 HTTP/1.1\r\n\r\n" % i
                reply = await asyncio.to_thread(_raw, hport, raw)
                assert reply.startswith(b"HTTP/1.1 403"), reply
            return {d["destination"]: d for d in proxy.detach(att)["denied"]}

    denied = asyncio.run(main())
    assert asked == [f"x{i}.test" for i in range(20)] + ["x0.test"]
    assert "asked about 20 names already" in denied["x25.test:1"]["reason"]
    assert denied["x0.test:1"]["connections"] == 2


def test_a_stalled_download_parks_a_bounded_amount_in_the_proxy() -> None:
    """A client that reads fast (so that the kernel grows the proxy's receive buffer)
    and then stops reading: what the server can still send before it blocks is what
    the proxy holds for it. Left to autotuning that was up to tcp_rmem's maximum (32
    MiB) per connection, charged to the agent: 64 such connections of one command
    parked 1.8 GB."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    sent = [0]
    blocked = threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
        conn.settimeout(2)
        chunk = b"x" * (256 << 10)
        with contextlib.suppress(OSError):
            while True:
                sent[0] += conn.send(chunk)
        blocked.set()
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    with _proxy([f"pkg.test:{port}", f"127.0.0.1:{port}"], {"pkg.test": ["127.0.0.1"]}) as (
        _p, env, _a,
    ):  # fmt: skip
        hport = int(env["HTTP_PROXY"].rsplit(":", 1)[1])
        c = socket.socket()
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        c.connect(("127.0.0.1", hport))
        c.sendall(b"CONNECT pkg.test:%d HTTP/1.1\r\n\r\n" % port)
        got = 0
        while got < 200 << 20:  # read fast: the receive buffers grow
            data = c.recv(1 << 20)
            assert data
            got += len(data)
        read_at_stall = got
        assert blocked.wait(20), "the server never blocked"
        parked = sent[0] - read_at_stall
        c.close()
    server.close()
    assert parked < 16 << 20, f"{parked >> 20} MiB parked in the proxy for one connection"


@pytest.mark.parametrize("name", ["faß.de", "FAẞ.de", "βόλος.com", "a\u200db.example",
                                  "a\u200cb.example", "*.straße.example"])  # fmt: skip
def test_names_idna_2003_and_2008_read_differently_are_refused(name: str) -> None:
    """Python's idna codec (IDNA 2003) maps faß.de to fass.de; curl, browsers and
    registries (IDNA 2008) read it as xn--fa-hia.de, another domain: an entry written
    one way allowed a domain nobody wrote. Both entries and requests are refused."""
    with pytest.raises(ConfigurationError, match="IDNA 2003 maps away"):
        parse_entry(name)
    with pytest.raises(ValueError, match="xn-- form"):
        normalize_host(name.removeprefix("*."))
    assert parse_entry("xn--fa-hia.de").host == "xn--fa-hia.de"


def test_a_question_nobody_answers_is_a_refusal_with_a_reply(site: tuple[Path, int]) -> None:
    """ask_timeout passed: the client gets a 403 saying so and the report lists it (a
    TimeoutError used to close the connection with neither)."""
    _, port = site

    async def ask(host: str, port_: int) -> bool:
        await asyncio.sleep(30)
        return True

    async def main() -> tuple[bytes, list[dict[str, Any]]]:
        with _proxy([f"pkg.test:{port}"], {"slow.test": ["127.0.0.1"]}, ask=ask) as (
            proxy, env, att,
        ):  # fmt: skip
            proxy.ask_timeout = 0.5
            hport = int(env["HTTP_PROXY"].rsplit(":", 1)[1])
            reply = await asyncio.to_thread(_raw, hport, b"CONNECT slow.test:1 HTTP/1.1\r\n\r\n")
            return reply, proxy.detach(att)["denied"]

    reply, denied = asyncio.run(main())
    assert reply.startswith(b"HTTP/1.1 403"), reply
    assert b"no answer came in 0.5 s" in reply
    assert denied == [{"destination": "slow.test:1", "connections": 1,
                       "reason": "slow.test:1 is not in allowed_domains, and no answer came "
                       "in 0.5 s"}]  # fmt: skip


@needs_curl
def test_a_kept_alive_proxy_connection_never_carries_a_request_to_another_host() -> None:
    """curl keeps a proxy connection alive and sends its next plain-HTTP request, for
    another host, down it. The proxy had joined that connection to the first host: the
    second request (with the second host's credentials) reached the first host, whose
    answer curl took as the second's. Each response is now told Connection: close."""
    seen: dict[str, list[bytes]] = {"a": [], "b": []}

    def keep_alive_server(tag: str) -> int:
        """Answers every request on a connection, ignoring Connection: close."""
        server = socket.create_server(("127.0.0.1", 0))

        def handle(conn: socket.socket) -> None:
            buf = b""
            with contextlib.suppress(OSError):
                while data := conn.recv(65536):
                    buf += data
                    while b"\r\n\r\n" in buf:
                        head, buf = buf.split(b"\r\n\r\n", 1)
                        seen[tag].append(head)
                        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n"
                                     + tag.encode())  # fmt: skip

        def accept() -> None:
            with contextlib.suppress(OSError):
                while True:
                    threading.Thread(target=handle, args=(server.accept()[0],),
                                     daemon=True).start()  # fmt: skip

        threading.Thread(target=accept, daemon=True).start()
        return int(server.getsockname()[1])

    pa, pb = keep_alive_server("a"), keep_alive_server("b")
    entries = [f"a.test:{pa}", f"b.test:{pb}", f"127.0.0.1:{pa}", f"127.0.0.1:{pb}"]
    with _proxy(entries, {"a.test": ["127.0.0.1"], "b.test": ["127.0.0.1"]}) as (_p, env, _a):
        r = _curl(env, f"http://a.test:{pa}/one", "--next", "-u", "user:secret-of-b",
                  f"http://b.test:{pb}/two")  # fmt: skip
    assert r.stdout == "ab", (r.stdout, seen)
    assert len(seen["a"]) == 1 and b"secret" not in b"".join(seen["a"])
    assert len(seen["b"]) == 1
