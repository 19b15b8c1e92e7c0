"""The command line's small edges a newcomer meets first: each error names its cause and
its fix, a pipe closed early is not an error, Ctrl-C still gives a JSON result."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from sandbox import FunctionTool, ToolRunner

SANDBOX = str(Path(sys.executable).parent / "sandbox")


def sandbox(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SANDBOX, *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def test_a_store_in_a_missing_directory_names_the_directory_and_create(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "approvals.db"
    done = sandbox("approvals", "list", "--store", str(missing))
    assert done.returncode == 2
    assert f"the directory {missing.parent} does not exist" in done.stderr
    assert "--create" in done.stderr and "Traceback" not in done.stderr


def test_a_misspelt_option_gets_the_subcommands_usage_and_a_suggestion() -> None:
    done = sandbox("check", "--polcy", "readonly", "--", "ls")
    assert done.returncode == 2
    assert done.stderr.startswith("usage: sandbox check ")
    assert "did you mean --policy?" in done.stderr
    nested = sandbox("approvals", "list", "--stroe", "x.db")
    assert nested.stderr.startswith("usage: sandbox approvals list ")
    assert "did you mean --store?" in nested.stderr


def test_an_oversize_command_is_a_usage_error_not_a_refusal(tmp_path: Path) -> None:
    words = ["a" * 100_000] * 11
    done = sandbox("run", "--approve", "auto", "--json", "--", "echo", *words, cwd=tmp_path)
    assert done.returncode == 2  # not 125, "not approved": nobody was asked
    body = json.loads(done.stdout)
    assert body["status"] == "error" and "1,100,0" in body["error"]
    assert "put long input in a file" in body["error"]


def test_a_listing_piped_into_head_stops_quietly(tmp_path: Path) -> None:
    db = tmp_path / "approvals.db"

    def deploy(n: int) -> dict[str, int]:
        """Deploy."""
        return {"n": n}

    runner = ToolRunner([FunctionTool(deploy, require_confirmation=True)], store_path=str(db))
    for n in range(400):
        runner.call_sync("deploy", {"n": n})
    done = subprocess.run(f"'{SANDBOX}' approvals list --store '{db}' | head -5",
                          shell=True, capture_output=True, text=True, timeout=120)
    assert len(done.stdout.splitlines()) == 5
    assert done.stderr == ""


def test_ctrl_c_during_run_json_prints_a_json_result(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [SANDBOX, "run", "--approve", "auto", "--json", "--workspace", str(tmp_path), "--",
         "touch started; sleep 30"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").exists():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130
    body = json.loads(out)
    assert body["status"] == "interrupted" and body["signal"] == "SIGINT"
    assert "process tree was killed" in body["error"]
