"""`sandbox mcp` as an MCP host runs it: started from another directory, with a named
policy and a tools *file* (no PYTHONPATH), over stdio and Streamable HTTP, driven by the
real `mcp` Python client; protocol details checked on the wire where the client hides
them (a raw JSON-RPC peer speaking 2024-11-05)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import IO, Any

import anyio
import pytest

pytest.importorskip("mcp")

import httpx2
import mcp_types as mtypes
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from sandbox import ApprovalStore, BashToolPolicy, ExecuteBashTool, policies
from sandbox.integrations.mcp import (
    DEFAULT_APPROVAL_TIMEOUT,
    bash_policy_is_read_only,
    tool_annotations,
)
from tests.paths import REPO, TESTS

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

FIXTURES = TESTS / "fixtures"
TOOLS_FILE = FIXTURES / "mcp_tools.py"
SANDBOX = str(Path(sys.executable).parent / "sandbox")  # the installed console script


def host_env(log: Path) -> dict[str, str]:
    """What an MCP host passes: its own environment, no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["SANDBOX_TEST_LOG"] = str(log)
    return env


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


class Human:
    def __init__(self, *answers: mtypes.ElicitResult, delay: float = 0.0) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []
        self.delay = delay

    async def __call__(self, context: Any, params: mtypes.ElicitRequestParams
                       ) -> mtypes.ElicitResult:
        self.asked.append(params.message)
        await anyio.sleep(self.delay)
        return self.answers.pop(0)


def approve() -> mtypes.ElicitResult:
    return mtypes.ElicitResult(action="accept", content={"approve": True})


@asynccontextmanager
async def stdio_client(tmp_path: Path, *args: str, human: Human | None = None,
                       ) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=SANDBOX, args=["mcp", "--tools", f"{TOOLS_FILE}:TOOLS", *args],
        env=host_env(tmp_path / "side-effects.log"), cwd="/")
    async with Client(params, elicitation_callback=human, mode="legacy",
                      read_timeout_seconds=30) as client:
        yield client


# -- named policy, tools file, from / --------------------------------------------------


async def test_named_policy_and_tools_file_work_from_the_root_directory(
        tmp_path: Path) -> None:
    (tmp_path / "note.txt").write_text("hi\n")
    async with stdio_client(tmp_path, "--policy", "readonly", "--workspace",
                            str(tmp_path)) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        listed = await client.call_tool("execute_bash", {"command": "ls"})
        note = await client.call_tool("read_note", {"name": "todo"})
    assert {"execute_bash", "wipe", "read_note", "deploy"} <= names
    assert isinstance(listed.structured_content, dict)
    assert listed.structured_content["stdout"].split() == ["note.txt"]
    assert note.structured_content == {"note": "contents of todo"}


async def test_tools_carry_title_annotations_and_an_output_schema(tmp_path: Path) -> None:
    async with stdio_client(tmp_path, "--policy", "readonly",
                            "--workspace", str(tmp_path)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        result = await client.call_tool("read_note", {"name": "x"})
        blocked = await client.call_tool("deploy", {"env": "prod"})
    bash, wipe = tools["execute_bash"], tools["wipe"]
    assert bash.title and wipe.title == "Wipe"
    assert bash.annotations is not None and wipe.annotations is not None
    # Under the read-only policy execute_bash writes nothing; wipe may destroy.
    assert bash.annotations.read_only_hint is True
    assert bash.annotations.destructive_hint is False
    assert bash.annotations.idempotent_hint is True
    assert bash.annotations.open_world_hint is False
    assert wipe.annotations.read_only_hint is False
    assert wipe.annotations.destructive_hint is True
    for tool in tools.values():
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
    assert bash.output_schema is not None
    assert {"stdout", "stderr", "returncode", "status", "error"} <= set(
        bash.output_schema["properties"])
    # The real client validates structuredContent against the schema; these came through.
    assert result.structured_content == {"note": "contents of x"}
    assert blocked.is_error and isinstance(blocked.structured_content, dict)
    assert blocked.structured_content["status"] == "blocked"


def test_read_only_hint_is_derived_from_the_policy(tmp_path: Path) -> None:
    def hint(policy: BashToolPolicy) -> bool | None:
        tool = ExecuteBashTool(workspace=tmp_path, policy=policy)
        return tool_annotations(tool).read_only_hint

    named = {name: BashToolPolicy.from_toml(policies.resolve(name)) for name in policies.names()}
    assert hint(named["readonly"]) is True and hint(named["git-readonly"]) is True
    assert hint(named["python-dev"]) is False
    assert hint(BashToolPolicy()) is False  # "*" allows everything
    # Only listed programs, but an option that writes a file is let through: not read-only.
    sort_writes = BashToolPolicy(allowed_command_prefixes=("sort", "ls"),
                                 blocked_operators=(">",))
    assert sort_writes.check("sort -o out in").allowed
    assert not bash_policy_is_read_only(sort_writes)
    assert not bash_policy_is_read_only(BashToolPolicy(allowed_command_prefixes=("ls",)))
    # Any program, but the OS keeps everything read-only and refuses to run otherwise.
    confined = dict(filesystem="read-only", network="none")
    assert bash_policy_is_read_only(BashToolPolicy(**confined, confinement="required"))
    assert not bash_policy_is_read_only(BashToolPolicy(**confined))  # best-effort
    assert not bash_policy_is_read_only(BashToolPolicy(**confined, confinement="required",
                                                       writable_paths=("/srv",)))


# -- protocol details -------------------------------------------------------------------


async def test_unknown_tool_is_a_json_rpc_invalid_params_error(tmp_path: Path) -> None:
    async with stdio_client(tmp_path) as client:
        with pytest.raises(MCPError) as caught:
            await client.call_tool("no_such_tool", {})
    assert caught.value.code == -32602
    assert "no_such_tool" in caught.value.message and "wipe" in caught.value.message


def test_default_approval_timeout_fits_inside_the_typescript_clients_60_s() -> None:
    assert DEFAULT_APPROVAL_TIMEOUT <= 50
    help_text = subprocess.run([SANDBOX, "mcp", "--help"], capture_output=True, text=True,
                               check=True).stdout
    assert "default: 45" in help_text and "60 s" in help_text


async def test_progress_is_reported_while_a_call_waits_for_approval(tmp_path: Path) -> None:
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    human = Human(approve(), delay=1.2)
    async with stdio_client(tmp_path, "--progress-interval", "0.2",
                            "--approval-timeout", "30", human=human) as client:
        result = await client.call_tool("wipe", {"target": "prod"},
                                        progress_callback=on_progress)
        quiet = await client.call_tool("read_note", {"name": "n"},
                                       progress_callback=on_progress)
    assert result.structured_content == {"wiped": "prod"}
    assert quiet.structured_content == {"note": "contents of n"}
    assert len(progress) >= 3
    values = [v for v, _, _ in progress]
    assert values == sorted(values) and len(set(values)) == len(values)
    assert all(total == 30 for _, total, _ in progress)
    assert all(m and "waiting for a human to approve wipe" in m for _, _, m in progress)


class RawPeer:
    """A JSON-RPC client written by hand, to see exactly what the server sends."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        assert proc.stdin is not None and proc.stdout is not None
        self.stdin: IO[bytes] = proc.stdin
        self.stdout: IO[bytes] = proc.stdout

    def send(self, message: dict[str, Any]) -> None:
        self.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
        self.stdin.flush()

    def receive(self) -> dict[str, Any]:
        line = self.stdout.readline()
        assert line, "the server closed its output"
        message: dict[str, Any] = json.loads(line)
        return message


@contextmanager
def raw_server(tmp_path: Path, *args: str) -> Iterator[RawPeer]:
    proc = subprocess.Popen(
        [SANDBOX, "mcp", "--tools", f"{TOOLS_FILE}:TOOLS", *args], cwd="/",
        env=host_env(tmp_path / "side-effects.log"), stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        yield RawPeer(proc)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("version,mode", [("2024-11-05", None), ("2025-06-18", None),
                                          ("2025-11-25", "form")])
def test_elicitation_mode_is_sent_only_to_clients_that_know_it(
        tmp_path: Path, version: str, mode: str | None) -> None:
    with raw_server(tmp_path) as peer:
        peer.send({"id": 1, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "raw", "version": "0"}}})
        assert peer.receive()["result"]["protocolVersion"] == version
        peer.send({"method": "notifications/initialized"})
        peer.send({"id": 2, "method": "tools/call",
                   "params": {"name": "wipe", "arguments": {"target": "prod"}}})
        request = peer.receive()
        assert request["method"] == "elicitation/create"
        assert request["params"].get("mode") == mode
        assert "mode" in request["params"] if mode else "mode" not in request["params"]
        peer.send({"id": request["id"], "result": {"action": "accept",
                                                   "content": {"approve": True}}})
        result = peer.receive()
    assert result["id"] == 2
    assert result["result"]["structuredContent"] == {"wiped": "prod"}
    assert lines(tmp_path / "side-effects.log") == ["wiped prod"]


async def wait_for_pending(store: ApprovalStore) -> list[Any]:
    """Poll the store the way a web page or `sandbox approvals list` would."""
    with anyio.fail_after(15):
        pending = store.pending()
        while not pending:
            await anyio.sleep(0.05)
            pending = store.pending()
    return pending


def audit_events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_a_call_the_client_cancels_is_recorded_as_cancelled(tmp_path: Path) -> None:
    db, audit = tmp_path / "approvals.db", tmp_path / "audit.jsonl"
    async with stdio_client(tmp_path, "--approvals", "queue", "--store", str(db),
                            "--audit", str(audit), "--no-elicitation") as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "wipe", {"target": "prod"})
            [request] = await wait_for_pending(ApprovalStore(db))
            tg.cancel_scope.cancel()  # the client abandons the call: notifications/cancelled
        with anyio.fail_after(10):
            status = "pending"
            while status == "pending":
                await anyio.sleep(0.05)
                status = ApprovalStore(db).get_request(request.id).status
        assert (await client.call_tool("read_note", {"name": "n"})).structured_content
    assert ApprovalStore(db).get_request(request.id).status == "cancelled"
    assert ApprovalStore(db).pending() == []
    [event] = [e for e in audit_events(audit) if e.get("event") == "tool.cancelled"]
    assert event["confirmation_id"] == request.id and event["tool"] == "wipe"
    assert lines(tmp_path / "side-effects.log") == ["read n"]


async def test_a_call_whose_client_disconnects_is_recorded_as_cancelled(
        tmp_path: Path) -> None:
    db, audit = tmp_path / "approvals.db", tmp_path / "audit.jsonl"
    with raw_server(tmp_path, "--approvals", "queue", "--store", str(db), "--audit",
                    str(audit)) as peer:
        peer.send({"id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}})
        peer.receive()
        peer.send({"method": "notifications/initialized"})
        peer.send({"id": 2, "method": "tools/call",
                   "params": {"name": "wipe", "arguments": {"target": "prod"}}})
        [request] = await wait_for_pending(ApprovalStore(db))
        peer.stdin.close()  # the host went away
        assert peer.proc.wait(15) == 0
    assert ApprovalStore(db).get_request(request.id).status == "cancelled"
    assert any(e.get("event") == "tool.cancelled" for e in audit_events(audit))
    assert lines(tmp_path / "side-effects.log") == []


# -- startup errors ---------------------------------------------------------------------


def start_and_fail(*args: str, cwd: str = "/") -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([SANDBOX, "mcp", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=30, stdin=subprocess.DEVNULL,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert proc.returncode == 2, proc
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("sandbox mcp: cannot start: ")
    assert proc.stdout == ""  # stdout is the protocol channel
    return proc


def test_startup_errors_speak_to_whoever_configures_the_host(tmp_path: Path) -> None:
    broken = tmp_path / "broken_tools.py"
    broken.write_text("import os\n\nTOOLS = [undefined_name]\n")
    assert "no policy named 'readonly-typo'" in start_and_fail(
        "--policy", "readonly-typo").stderr
    assert "does not exist" in start_and_fail("--policy", "policies/readonly.toml").stderr
    assert "no file" in start_and_fail("--tools", "/nope/tools.py:TOOLS").stderr
    missing_module = start_and_fail("--tools", "my_tools_module:TOOLS").stderr
    assert "no module 'my_tools_module'" in missing_module and ".py:TOOLS" in missing_module
    failing = start_and_fail("--tools", f"{broken}:TOOLS").stderr
    assert "NameError" in failing and f"{broken}:3" in failing
    typo = tmp_path / "typo_tools.py"
    typo.write_text("def f(:\n    pass\n")
    assert "SyntaxError" in (out := start_and_fail("--tools", f"{typo}:TOOLS").stderr)
    assert f"{typo}:1" in out
    assert "has no attribute 'NOPE'" in start_and_fail("--tools", f"{TOOLS_FILE}:NOPE").stderr
    assert "is not a directory" in start_and_fail("--policy", "readonly", "--workspace",
                                                  "/nope").stderr
    readme = REPO / "README.md"
    assert "not a database" in start_and_fail(
        "--policy", "readonly", "--store", str(readme)).stderr
    assert "nothing to serve" in start_and_fail().stderr


# -- Streamable HTTP --------------------------------------------------------------------


class HttpServer:
    def __init__(self, tmp_path: Path, *args: str, token: str | None = None) -> None:
        env = host_env(tmp_path / "side-effects.log")
        if token:
            env["SANDBOX_MCP_TOKEN"] = token
        self.proc = subprocess.Popen(
            [SANDBOX, "mcp", "--http", "127.0.0.1:0", "--tools", f"{TOOLS_FILE}:TOOLS",
             *args], cwd="/", env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        self.url = ""
        self.token = token or ""
        assert self.proc.stderr is not None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (self.url and self.token):
            line = self.proc.stderr.readline()
            assert line, "the server exited before it listened"
            if found := re.search(r"serving Streamable HTTP at (\S+)", line):
                self.url = found.group(1)
            if found := re.search(r"bearer token .*: (\S+)$", line.strip()):
                self.token = found.group(1)
        assert self.url.startswith("http://127.0.0.1:") and self.url.endswith("/mcp")

    def client(self, token: str | None = None, human: Human | None = None) -> Client:
        http = create_mcp_http_client(
            headers={"Authorization": f"Bearer {token if token is not None else self.token}"})
        return Client(streamable_http_client(self.url, http_client=http), mode="legacy",
                      elicitation_callback=human, read_timeout_seconds=30)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[Any]:
    started: list[HttpServer] = []

    def start(*args: str, token: str | None = None) -> HttpServer:
        server = HttpServer(tmp_path, *args, token=token)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


async def test_streamable_http_with_a_generated_bearer_token(tmp_path: Path,
                                                             http_server: Any) -> None:
    (tmp_path / "note.txt").write_text("over http\n")
    server = http_server("--policy", "readonly", "--workspace", str(tmp_path))
    assert len(server.token) >= 32
    human = Human(approve())
    async with server.client(human=human) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        listed = await client.call_tool("execute_bash", {"command": "ls"})
        wiped = await client.call_tool("wipe", {"target": "staging"})
    assert "execute_bash" in names and "wipe" in names
    assert isinstance(listed.structured_content, dict)
    assert listed.structured_content["stdout"] == "note.txt\n"
    assert wiped.structured_content == {"wiped": "staging"}  # elicitation over HTTP
    assert len(human.asked) == 1
    assert lines(tmp_path / "side-effects.log") == ["wiped staging"]


async def test_streamable_http_refuses_a_missing_or_wrong_token(tmp_path: Path,
                                                               http_server: Any) -> None:
    server = http_server(token="a-token-given-by-the-operator-0123")
    async with httpx2.AsyncClient() as http:
        body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "x", "version": "0"}}}
        headers = {"Accept": "application/json, text/event-stream"}
        none = await http.post(server.url, json=body, headers=headers)
        wrong = await http.post(server.url, json=body,
                                headers={**headers, "Authorization": "Bearer wrong"})
        right = await http.post(server.url, json=body, headers={
            **headers, "Authorization": "Bearer a-token-given-by-the-operator-0123"})
    assert none.status_code == 401 and wrong.status_code == 401
    assert "Bearer" in none.headers["www-authenticate"]
    assert right.status_code == 200
    async with server.client() as client:
        assert (await client.call_tool("read_note", {"name": "n"})).structured_content


def test_http_refuses_a_non_loopback_address_unless_asked() -> None:
    refused = start_and_fail("--tools", f"{TOOLS_FILE}:TOOLS", "--http", "0.0.0.0:0")
    assert "--allow-remote" in refused.stderr
    assert "HOST:PORT" in start_and_fail("--tools", f"{TOOLS_FILE}:TOOLS", "--http",
                                         "8080").stderr
