"""network="allowlist" end to end: ExecuteBashTool runs real clients (curl, Python's
urllib, pip, git over http) in the command's own network namespace, against real
servers on the host's 127.0.0.1; only the egress proxy's two ports are inside. As root
here, and as a throwaway unprivileged user in a process of its own."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox import BashToolPolicy, ExecuteBashTool, ToolConfirmation, ToolContext
from sandbox.bash.network.proxy import resolver_for_tests
from sandbox.errors import ConfigurationError, PolicyFileError
from tests.paths import REPO

from .test_network_proxy import _http_server, _wheel

pytestmark = [pytest.mark.timeout(120), pytest.mark.containment]

needs = pytest.mark.needs_program("curl")


def _names(mapping: dict[str, list[str]]) -> Any:
    async def resolve(host: str, port: int) -> list[str]:
        if host in mapping:
            return mapping[host]
        raise OSError(f"test resolver: no address for {host}")

    return resolver_for_tests(resolve)


def _run(tool: ExecuteBashTool, command: str) -> dict[str, Any]:
    ctx = ToolContext(function_call_id="c", tool_confirmation=ToolConfirmation(confirmed=True))
    return asyncio.run(tool.run_async(args={"command": command}, tool_context=ctx))


@pytest.fixture
def site(tmp_path: Path) -> Iterator[int]:
    root = tmp_path / "site"
    root.mkdir()
    (root / "hello.txt").write_text("hello from the listed host\n")
    with _http_server(root) as port:
        yield port


def _tool(ws: Path, *entries: str, **kw: Any) -> ExecuteBashTool:
    policy = BashToolPolicy(network="allowlist", allowed_domains=entries, **kw)
    return ExecuteBashTool(workspace=ws, policy=policy)


def test_policy_errors_name_the_cause() -> None:
    with pytest.raises(ConfigurationError, match=r"allowed_domains entry 'https://x\.org'"):
        BashToolPolicy(network="allowlist", allowed_domains=("https://x.org",))
    with pytest.raises(ConfigurationError, match="only let through with network='allowlist'"):
        BashToolPolicy(allowed_domains=("pypi.org",))
    with pytest.raises(ConfigurationError, match="lets nothing through"):
        BashToolPolicy(network="allowlist")


def test_policy_file(tmp_path: Path) -> None:
    f = tmp_path / "p.toml"
    f.write_text('allowed_command_prefixes = ["curl"]\nnetwork = "allowlist"\n'
                 'allowed_domains = ["pypi.org", "*.pythonhosted.org:443"]\n'
                 "ask_for_unlisted_domains = true\n")  # fmt: skip
    policy = BashToolPolicy.from_toml(f)
    assert policy.allowed_domains == ("pypi.org", "*.pythonhosted.org:443")
    assert policy.ask_for_unlisted_domains is True
    f.write_text('allowed_command_prefixes = ["curl"]\nnetwork = "allowlist"\n'
                 'allowed_domains = ["pypi.org:99999"]\n')  # fmt: skip
    with pytest.raises(PolicyFileError, match=r"p\.toml.*'pypi\.org:99999'"):
        BashToolPolicy.from_toml(f)


@needs
def test_listed_name_served_everything_else_refused(shared_workspace: Path, site: int) -> None:
    port = site
    tool = _tool(shared_workspace, f"localhost:{port}")
    r = _run(tool, f"curl -sS --max-time 10 http://localhost:{port}/hello.txt")
    assert r["stdout"] == "hello from the listed host\n", r
    assert r["network"] == {"allowed": [{"destination": f"localhost:{port}", "connections": 1}],
                            "denied": []}  # fmt: skip
    assert "egress proxy" in r["containment"]["netns"]
    # Unlisted name, raw IP, another port of a listed name: refused with a reason.
    for url in (f"http://127.0.0.1:{port}/hello.txt", f"http://localhost:{port + 1}/x"):
        r = _run(tool, f"curl -sS -o /dev/null -w '%{{http_code}}' --max-time 10 {url}")
        assert r["stdout"] == "403", r
        assert r["network"]["denied"][0]["reason"].endswith("is not in allowed_domains")
    # Around the proxy: no route to the host's listeners, no resolver, no UDP out.
    r = _run(tool, f"curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:{port}/hello.txt")
    assert r["returncode"] != 0 and "hello" not in r["stdout"]
    r = _run(tool, "getent hosts localhost.localdomain example.org; cat /etc/resolv.conf "
             ">/dev/null; python3 -c \"import socket; print(socket.getaddrinfo('example.org', "
             "80))\"")  # fmt: skip
    assert "example.org" not in r["stdout"]


@needs
def test_udp_and_direct_tcp_do_not_leave(shared_workspace: Path, site: int) -> None:
    port = site
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(0.5)
    uport = udp.getsockname()[1]
    tool = _tool(shared_workspace, f"localhost:{port}")
    code = (f"import socket\ns=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"for a in ('127.0.0.1', '10.0.2.3', '8.8.8.8'):\n"
            f"    try: s.sendto(b'leak', (a, {uport}))\n"
            f"    except OSError as e: print('udp', a, e.errno)\n"
            f"t=socket.socket()\nt.settimeout(2)\n"
            f"try: t.connect(('127.0.0.1', {port})); print('tcp connected')\n"
            f"except OSError as e: print('tcp', e.errno)\n")  # fmt: skip
    (shared_workspace / "probe.py").write_text(code)
    r = _run(tool, "python3 probe.py")
    assert "tcp connected" not in r["stdout"], r
    with pytest.raises(TimeoutError):
        udp.recvfrom(100)
    udp.close()


@needs
def test_a_listed_name_rebound_to_a_private_address_reaches_nothing(
    shared_workspace: Path, site: int
) -> None:
    port = site
    tool = _tool(shared_workspace, f"pkg.test:{port}")
    with _names({"pkg.test": ["127.0.0.1"]}):
        r = _run(tool, f"curl -sS -o /dev/null -w '%{{http_code}}' http://pkg.test:{port}/hello.txt")
    assert r["stdout"] == "403"
    assert "127.0.0.1 (loopback)" in r["network"]["denied"][0]["reason"]
    # Naming the address explicitly lets it through.
    tool = _tool(shared_workspace, f"pkg.test:{port}", f"127.0.0.1:{port}")
    with _names({"pkg.test": ["127.0.0.1"]}):
        r = _run(tool, f"curl -sS http://pkg.test:{port}/hello.txt")
    assert r["stdout"].startswith("hello"), r


@needs
def test_https_curl_and_python_through_connect(shared_workspace: Path, tmp_path: Path) -> None:
    trustme = pytest.importorskip("trustme")
    import ssl

    ca = trustme.CA()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("secure.test").configure_cert(ctx)
    root = tmp_path / "tls"
    root.mkdir()
    (root / "x.txt").write_text("over tls\n")
    ca.cert_pem.write_to_path(str(shared_workspace / "ca.pem"))
    (shared_workspace / "ca.pem").chmod(0o644)
    with _http_server(root, ctx) as port:
        tool = _tool(shared_workspace, f"secure.test:{port}", f"127.0.0.1:{port}")
        with _names({"secure.test": ["127.0.0.1"]}):
            r = _run(tool, f"curl -sS --cacert ca.pem https://secure.test:{port}/x.txt && "
                     "python3 -c \"import ssl, urllib.request; c=ssl.create_default_context("
                     f"cafile='ca.pem'); print(urllib.request.urlopen('https://secure.test:{port}"
                     "/x.txt', context=c).read().decode(), end='')\"")  # fmt: skip
    assert r["stdout"] == "over tls\nover tls\n", r
    assert r["network"]["allowed"] == [{"destination": f"secure.test:{port}", "connections": 2}]


@needs
def test_pip_and_git_inside_the_sandbox(shared_workspace: Path, tmp_path: Path) -> None:
    index = tmp_path / "index"
    (index / "tinypkg").mkdir(parents=True)
    wheel = _wheel(index / "tinypkg")
    (index / "tinypkg" / "index.html").write_text(f'<a href="{wheel}">{wheel}</a>\n')
    git = shutil.which("git")
    assert git is not None
    src = tmp_path / "src"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run([git, "init", "-q", str(src)], check=True, env=env)
    (src / "f").write_text("x\n")
    subprocess.run([git, "-C", str(src), "add", "f"], check=True, env=env)
    subprocess.run([git, "-C", str(src), "commit", "-qm", "one"], check=True, env=env)
    subprocess.run([git, "clone", "-q", "--bare", str(src), str(index / "repo.git")],
                   check=True, env=env)  # fmt: skip
    subprocess.run([git, "-C", str(index / "repo.git"), "update-server-info"], check=True)
    with _http_server(index) as port:
        tool = _tool(shared_workspace, f"index.test:{port}", f"127.0.0.1:{port}")
        with _names({"index.test": ["127.0.0.1"]}):
            r = _run(tool, f"git clone -q http://index.test:{port}/repo.git clone && cat clone/f")
            assert r["returncode"] == 0, r
            assert r["stdout"] == "x\n"
            # pip, run by a Python every user may run (the command is not the agent).
            if subprocess.run(["python3", "-m", "pip", "--version"],
                              capture_output=True).returncode != 0:  # fmt: skip
                pytest.skip("python3 has no pip here")
            r = _run(tool, "python3 -m pip install -q --no-cache-dir "
                     "--disable-pip-version-check --target ./t --index-url "
                     f"http://index.test:{port}/ --trusted-host index.test tinypkg")  # fmt: skip
            assert r["returncode"] == 0, r
    assert (shared_workspace / "t" / "tinypkg" / "__init__.py").exists()


# --------------------------------------------------------------------------- unprivileged

_AGENT = textwrap.dedent("""
    import asyncio, json, sys
    from pathlib import Path
    from sandbox import BashToolPolicy, ExecuteBashTool, ToolConfirmation, ToolContext
    ws, port = Path(sys.argv[1]), int(sys.argv[2])
    tool = ExecuteBashTool(workspace=ws, policy=BashToolPolicy(
        network="allowlist", allowed_domains=(f"localhost:{port}",)))
    async def main():
        out = []
        for cmd in (f"curl -sS --max-time 10 http://localhost:{port}/hello.txt",
                    f"curl -sS -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/x",
                    f"curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:{port}/hello.txt"):
            ctx = ToolContext(function_call_id="c",
                              tool_confirmation=ToolConfirmation(confirmed=True))
            r = await tool.run_async(args={"command": cmd}, tool_context=ctx)
            out.append({k: r.get(k) for k in ("stdout", "returncode", "network")})
        print(json.dumps(out))
    asyncio.run(main())
""")


@needs
@pytest.mark.needs_root
@pytest.mark.needs_program("setpriv", "useradd")
def test_as_an_unprivileged_user(site: int, tmp_path: Path) -> None:
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else None
    if python is None or subprocess.run([python, "-c", "import sys; assert sys.version_info[:2]"
                                         f" == {sys.version_info[:2]}"]).returncode:  # fmt: skip
        pytest.skip("no Python of this version that every user can run")
    repo = REPO
    site_packages = [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]
    name = f"sbxnet{os.getpid()}"
    subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", name], check=True,
                   capture_output=True)  # fmt: skip
    ws = Path(f"/tmp/sbxnet-ws-{os.getpid()}")
    try:
        ws.mkdir()
        shutil.chown(ws, name, name)
        agent = ws / "agent.py"
        agent.write_text(_AGENT)
        env = {"PATH": "/usr/bin:/bin", "HOME": str(ws),
               "PYTHONPATH": ":".join([str(repo), *site_packages])}
        r = subprocess.run(["setpriv", "--reuid", name, "--regid", name, "--clear-groups",
                            "env", "-i", *(f"{k}={v}" for k, v in env.items()), python,
                            str(agent), str(ws), str(site)],
                           capture_output=True, text=True, timeout=90)  # fmt: skip
        assert r.returncode == 0, r.stderr[-2000:]
        served, refused, direct = json.loads(r.stdout)
        assert served["stdout"] == "hello from the listed host\n"
        assert served["network"]["allowed"] == [{"destination": f"localhost:{site}",
                                                 "connections": 1}]  # fmt: skip
        assert refused["stdout"] == "403"
        assert direct["returncode"] != 0
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(ws)
        subprocess.run(["userdel", "-f", name], capture_output=True, check=False)


# --------------------------------------------------------------------------- bad input


@needs
def test_hostile_clients_inside_leave_the_agent_up(shared_workspace: Path, site: int) -> None:
    port = site
    tool = _tool(shared_workspace, f"localhost:{port}", timeout_seconds=30)
    script = textwrap.dedent(f"""
        import socket, time
        big = b"GET http://localhost:{port}/ HTTP/1.1\\r\\nX: " + b"a" * 70000 + b"\\r\\n\\r\\n"
        s = socket.create_connection(("127.0.0.1", 3128)); s.sendall(big)
        print(s.recv(12).decode())
        half = socket.create_connection(("127.0.0.1", 3128)); half.sendall(b"CONNECT localhost:{port} HTTP/1.1\\r\\n")
        many = []
        for i in range(1000):
            try:
                c = socket.socket(); c.setblocking(False)
                try: c.connect(("127.0.0.1", 3128 if i % 2 else 1080))
                except BlockingIOError: pass
                many.append(c)
            except OSError: break
        print(len(many))
    """)
    (shared_workspace / "hostile.py").write_text(script)
    r = _run(tool, "python3 hostile.py")
    assert r["stdout"].splitlines()[0] == "HTTP/1.1 431", r
    fds = len(os.listdir("/proc/self/fd"))
    r = _run(tool, f"curl -sS --max-time 10 http://localhost:{port}/hello.txt")
    assert r["stdout"].startswith("hello"), r
    assert len(os.listdir("/proc/self/fd")) <= fds + 2  # the hostile run's sockets are gone


@needs
def test_connections_end_with_the_command(shared_workspace: Path) -> None:
    """A download still streaming when the command is killed is cut: the proxy holds
    nothing of a command that has ended."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted: list[socket.socket] = []

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            accepted.append(conn)
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n")
            with contextlib.suppress(OSError):
                while True:
                    conn.sendall(b"x" * 65536)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    tool = _tool(shared_workspace, f"localhost:{port}", timeout_seconds=2)
    r = _run(tool, f"curl -sS --limit-rate 100k http://localhost:{port}/ -o /dev/null")
    assert r["timed_out"]
    t.join(10)
    assert not t.is_alive()  # the server's send failed: the proxy closed its side
    listener.close()
    for c in accepted:
        c.close()


# --------------------------------------------------------------------------- asking


def _asking_runner(ws: Path, answer: Any, asked: list[dict[str, Any]],
                   domains: tuple[str, ...] = ("listed.test",)) -> Any:  # fmt: skip
    from sandbox import CallbackConfirmationProvider, ToolRunner

    async def provider(request: Any) -> Any:
        asked.append({"tool": request.tool, "args": dict(request.args)})
        return answer(request) if callable(answer) else answer

    policy = BashToolPolicy(allowed_command_prefixes=("curl",), no_confirmation_prefixes=("curl",),
                            network="allowlist", ask_for_unlisted_domains=True,
                            allowed_domains=domains)  # fmt: skip
    return ToolRunner([ExecuteBashTool(workspace=ws, policy=policy)],
                      provider=CallbackConfirmationProvider(provider))  # fmt: skip


@needs
def test_an_unlisted_name_is_asked_through_the_runner(shared_workspace: Path, site: int) -> None:
    port = site
    asked: list[dict[str, Any]] = []
    runner = _asking_runner(shared_workspace,
                            lambda req: req.args["host"] == "yes.test", asked)  # fmt: skip
    cmd = (f"curl -sS -o /dev/null -w '%{{http_code}} ' http://yes.test:{port}/hello.txt; "
           f"curl -sS -o /dev/null -w '%{{http_code}}' http://no.test:{port}/hello.txt")

    async def main() -> dict[str, Any]:
        with _names({"yes.test": ["127.0.0.1"], "no.test": ["127.0.0.1"]}):
            # The human approves yes.test for this connection; the address is still
            # checked: loopback needs an entry that names it.
            return await runner.call("execute_bash", {"command": cmd}, call_id="c1")

    r = asyncio.run(main())
    assert [a["tool"] for a in asked] == ["network", "network"], r["error"]
    assert {a["args"]["host"] for a in asked} == {"yes.test", "no.test"}
    assert all(a["args"]["command"] == cmd and a["args"]["port"] == port for a in asked)
    assert r["stdout"] == "403 403", r  # yes.test resolves to loopback, which no entry names
    denied = {d["destination"]: d["reason"] for d in r["network"]["denied"]}
    assert "127.0.0.1 (loopback)" in denied[f"yes.test:{port}"]
    assert "not in allowed_domains" in denied[f"no.test:{port}"]


@needs
def test_an_approved_name_goes_through_and_session_answers_are_remembered(
    shared_workspace: Path, site: int
) -> None:
    from sandbox import Decision

    port = site
    asked: list[dict[str, Any]] = []
    # A human's yes covers the name; the loopback address it resolves to is named by
    # an entry (as a public address would need none).
    runner = _asking_runner(shared_workspace, Decision.approve(scope="session"), asked,
                            ("listed.test", f"127.0.0.1:{port}"))  # fmt: skip
    cmd = f"curl -sS http://asked.test:{port}/hello.txt"

    async def main() -> list[dict[str, Any]]:
        with _names({"asked.test": ["127.0.0.1"]}):
            first = await runner.call("execute_bash", {"command": cmd}, call_id="c1")
            second = await runner.call("execute_bash", {"command": cmd + " -o /dev/null"},
                                       call_id="c2")  # fmt: skip
            return [first, second]

    first, second = asyncio.run(main())
    assert first["stdout"] == "hello from the listed host\n", first
    assert second["returncode"] == 0 and second["network"]["allowed"], second
    assert len(asked) == 1  # the session answer covered the second connection


@needs
def test_without_a_provider_an_unlisted_name_is_refused(shared_workspace: Path, site: int) -> None:
    from sandbox import ToolRunner

    policy = BashToolPolicy(allowed_command_prefixes=("curl",), no_confirmation_prefixes=("curl",),
                            network="allowlist", ask_for_unlisted_domains=True,
                            allowed_domains=("listed.test",))  # fmt: skip
    runner = ToolRunner([ExecuteBashTool(workspace=shared_workspace, policy=policy)])
    r = asyncio.run(runner.call("execute_bash", {
        "command": f"curl -sS -o /dev/null -w '%{{http_code}}' http://localhost:{site}/"}))
    assert r["stdout"] == "403"


@needs
def test_the_audit_log_records_each_decision(shared_workspace: Path, site: int,
                                             tmp_path: Path) -> None:  # fmt: skip
    from sandbox import AutoApprove, ToolRunner

    policy = BashToolPolicy(allowed_command_prefixes=("curl",), network="allowlist",
                            allowed_domains=(f"localhost:{site}",))  # fmt: skip
    audit = tmp_path / "audit.jsonl"
    runner = ToolRunner([ExecuteBashTool(workspace=shared_workspace, policy=policy)],
                        provider=AutoApprove(), audit_path=str(audit))  # fmt: skip
    cmd = (f"curl -s -o /dev/null http://localhost:{site}/hello.txt; "
           f"curl -s -o /dev/null http://127.0.0.1:{site}/")
    asyncio.run(runner.call("execute_bash", {"command": cmd}, call_id="a1"))
    finished = [json.loads(line) for line in audit.read_text().splitlines()
                if '"tool.finished"' in line]  # fmt: skip
    assert len(finished) == 1
    network = finished[0]["network"]
    assert network["allowed"] == [{"destination": f"localhost:{site}", "connections": 1}]
    assert network["denied"][0]["destination"] == f"127.0.0.1:{site}"


@needs
def test_a_yes_for_one_call_is_not_replayed_to_another(shared_workspace: Path, site: int) -> None:
    """Each (call, destination) is its own question, also for calls whose ids share a
    long prefix (the question's id once held only the first 226 characters)."""
    port = site
    asked: list[dict[str, Any]] = []
    answers = iter([True, False])
    runner = _asking_runner(shared_workspace, lambda req: next(answers), asked,
                            ("listed.test", f"127.0.0.1:{port}"))  # fmt: skip
    cmd = f"curl -sS -o /dev/null -w '%{{http_code}}' http://asked.test:{port}/hello.txt"
    prefix = "p" * 226

    async def main() -> list[dict[str, Any]]:
        with _names({"asked.test": ["127.0.0.1"]}):
            return [await runner.call("execute_bash", {"command": cmd}, call_id=prefix + tail)
                    for tail in ("-first-call", "-second-call")]  # fmt: skip

    first, second = asyncio.run(main())
    assert first["stdout"] == "200", first
    assert len(asked) == 2, asked  # the second call was asked too
    assert second["stdout"] == "403", second  # and its no was kept
