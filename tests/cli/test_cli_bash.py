"""`sandbox check`, `sandbox run`, `sandbox doctor` as a user runs them: real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)


def sandbox(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sandbox", *args], capture_output=True,
                          text=True, timeout=50, cwd=cwd, stdin=subprocess.DEVNULL)


def write_policy(tmp_path: Path, body: str) -> str:
    path = tmp_path / "policy.toml"
    if "allowed_command_prefixes" not in body:
        body = 'allowed_command_prefixes = ["*"]\n' + body
    path.write_text(body)
    return str(path)


def test_check_allows_with_exit_0_and_blocks_with_exit_1(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, 'allowed_command_prefixes = ["ls", "wc"]\n')
    assert sandbox("check", "--policy", policy, "--", "ls -la | wc -l").returncode == 0
    blocked = sandbox("check", "--policy", policy, "--", "ls; rm -rf /")
    assert blocked.returncode == 1
    assert "BLOCKED" in blocked.stdout and "rm" in blocked.stdout


def test_check_json_names_rule_simple_command_and_token(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, 'allowed_command_prefixes = ["ls"]\n')
    proc = sandbox("check", "--policy", policy, "--json", "--", "ls && /bin/rm x")
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and report["allowed"] is False
    assert report["rule"] == "R4" and report["token"] and report["simple_command"]


def test_check_reports_a_bad_policy_file_with_its_field(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, "timeout_seconds = -3\n")
    proc = sandbox("check", "--policy", policy, "--", "ls")
    assert proc.returncode == 2 and "timeout_seconds" in proc.stderr


def test_run_exits_with_the_commands_status(tmp_path: Path) -> None:
    proc = sandbox("run", "--approve", "auto", "--workspace", str(tmp_path), "--",
                   "echo out; exit 7")
    assert proc.returncode == 7 and proc.stdout == "out\n"


def test_run_blocked_command_exits_126_and_never_runs(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, 'allowed_command_prefixes = ["ls"]\n')
    proc = sandbox("run", "--approve", "auto", "--policy", policy, "--workspace",
                   str(tmp_path), "--", "touch pwned")
    assert proc.returncode == 126 and not (tmp_path / "pwned").exists()


def test_run_denied_command_exits_125_and_never_runs(tmp_path: Path) -> None:
    proc = sandbox("run", "--approve", "deny", "--json", "--workspace", str(tmp_path), "--",
                   "touch pwned")
    assert proc.returncode == 125 and json.loads(proc.stdout)["status"] == "denied"
    assert not (tmp_path / "pwned").exists()


def test_run_without_a_terminal_fails_closed(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["setsid", sys.executable, "-m", "sandbox", "run", "--workspace", str(tmp_path), "--",
         "touch pwned"],
        capture_output=True, text=True, timeout=50, stdin=subprocess.DEVNULL)
    assert proc.returncode == 125 and not (tmp_path / "pwned").exists()


def test_run_timeout_exits_124(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, "timeout_seconds = 0.5\n")
    proc = sandbox("run", "--approve", "auto", "--policy", policy, "--workspace",
                   str(tmp_path), "--", "sleep 30")
    assert proc.returncode == 124 and "timed out" in proc.stderr


def test_doctor_reports_the_mechanism_in_use() -> None:
    proc = sandbox("doctor", "--json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 0
    assert report["containment"] in report["mechanisms"]
    assert "whole-tree kill" in sandbox("doctor").stdout


@pytest.mark.parametrize("command", ["check", "run", "doctor", "demo", "approvals", "audit",
                                     "mcp"])
def test_every_command_has_help_with_an_example(command: str) -> None:
    proc = sandbox(command, "--help")
    assert proc.returncode == 0 and "example" in proc.stdout


def _cmdlines_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_run_treats_sigterm_and_sighup_like_ctrl_c(tmp_path: Path, signum: int) -> None:
    marker = f"sandbox-sig-{uuid.uuid4().hex}"
    ready = tmp_path / "ready"
    cli = subprocess.Popen(
        [sys.executable, "-m", "sandbox", "run", "--approve", "auto", "--workspace",
         str(tmp_path), "--",
         f"setsid -f sh -c 'sleep 300; true {marker}'; sh -c 'sleep 300; true {marker}' & "
         f"touch {ready}; wait"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), cli.stderr.read1(4096) if cli.poll() is not None else "no start"
        assert len(_cmdlines_with(marker)) >= 2
        cli.send_signal(signum)
        cli.wait(timeout=20)
        assert cli.returncode == 128 + signum
        deadline = time.monotonic() + 2
        while _cmdlines_with(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _cmdlines_with(marker) == []
    finally:
        for pid in _cmdlines_with(marker):
            os.kill(pid, signal.SIGKILL)
        if cli.poll() is None:
            cli.kill()
        cli.wait()
        assert cli.stdout is not None and cli.stderr is not None
        cli.stdout.close()
        cli.stderr.close()
