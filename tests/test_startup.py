"""Start-up: what a fresh process imports for `import sandbox` and for each command.

Speed itself is measured by bench/startup.py (never timed here); these pin what makes
it: the package's top level imports nothing but its lazy machinery, and a command does
not load the dependencies of the others (the MCP SDK, starlette, google-adk, structlog,
the approval models) to register its subcommands or to run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

pytestmark = pytest.mark.timeout(120)

# Runs `sandbox ARGS...` in this process (as the console script does) and writes the
# names in sys.modules, at exit, to the file named by the first argument.
_RECORD = r"""
import atexit, json, sys
out, args = sys.argv[1], sys.argv[2:]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv = ["sandbox", *args]
from sandbox.cli.main import main
raise SystemExit(main())
"""

# Loaded by no command but the one that serves them (and never by `import sandbox`).
_NOT_FOR_RUN = ("mcp", "mcp_types", "starlette", "uvicorn", "sse_starlette", "google.adk",
                "structlog", "sandbox.integrations", "sandbox.approval.channels.web",
                "sandbox.approval.store.sqlite", "sandbox.approval.store.postgres")


def _modules(tmp_path: Path, *args: str) -> tuple[set[str], subprocess.CompletedProcess[str]]:
    out = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", _RECORD, str(out), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=100,
                          stdin=subprocess.DEVNULL, check=False)
    assert out.exists(), done.stderr
    return set(json.loads(out.read_text())), done


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules for n in names if m == n or m.startswith(n + "."))


def test_import_sandbox_loads_only_the_lazy_machinery() -> None:
    code = ("import json, sys; before = set(sys.modules); import sandbox; "
            "print(json.dumps(sorted(set(sys.modules) - before)))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=True)
    new = set(json.loads(done.stdout))
    assert {m for m in new if m.startswith("sandbox")} == {"sandbox", "sandbox._lazy"}
    heavy = _loaded(new, ("pydantic", "anyio", "asyncio", "tree_sitter", "structlog",
                          "psutil", "sqlite3", "mcp", "starlette"))
    assert heavy == [], f"`import sandbox` loaded {heavy}"


def test_attributes_still_import_on_first_use() -> None:
    code = ("import sys, sandbox; assert 'sandbox.bash.tool' not in sys.modules; "
            "from sandbox import ExecuteBashTool, ToolRunner; "
            "assert ExecuteBashTool.__module__ == 'sandbox.bash.tool'; "
            "assert ToolRunner.__module__ == 'sandbox.approval.runner'")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, timeout=60, check=True)


def test_sandbox_run_loads_neither_mcp_nor_starlette_nor_adk(tmp_path: Path) -> None:
    modules, done = _modules(tmp_path, "run", "--approve", "auto", "--", "true")
    assert done.returncode == 0, done.stderr
    assert "sandbox.bash.tool" in modules  # it did run the command
    assert _loaded(modules, _NOT_FOR_RUN) == []


def test_sandbox_check_loads_no_gate_and_no_event_loop(tmp_path: Path) -> None:
    modules, done = _modules(tmp_path, "check", "--", "ls -la | wc -l")
    assert done.returncode == 0, done.stderr
    assert _loaded(modules, (*_NOT_FOR_RUN, "anyio", "sandbox.approval.models",
                             "sandbox.approval.runner", "sqlite3")) == []


def test_sandbox_help_registers_every_command_without_their_machinery(tmp_path: Path) -> None:
    modules, done = _modules(tmp_path, "--help")
    for command in ("run", "check", "doctor", "approvals", "audit", "mcp", "demo"):
        assert command in done.stdout
    assert _loaded(modules, (*_NOT_FOR_RUN, "anyio", "pydantic", "sandbox.approval",
                             "sandbox.bash", "sqlite3")) == []


def test_errors_of_a_store_are_still_one_sentence(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # cli.main no longer imports sqlite3 itself: a store's sqlite3.Error that slips
    # through a command is still reported in one sentence, not as an internal error.
    import argparse
    import importlib

    # The module (sandbox.cli's attribute `main` is the function).
    cli_main = importlib.import_module("sandbox.cli.main")

    def broken(args: argparse.Namespace) -> int:
        import sqlite3

        raise sqlite3.OperationalError("database is locked")

    def build() -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog="sandbox")
        parser.add_subparsers(dest="command").add_parser("boom").set_defaults(handler=broken)
        return parser

    monkeypatch.setattr(cli_main, "build_parser", build)
    assert cli_main.main(["boom"]) == 2
    err = capsys.readouterr().err
    assert "sandbox boom: database is locked" in err and "internal error" not in err


def test_sandbox_run_reserves_no_next_run(tmp_path: Path) -> None:
    # One command, then the process exits: runs reserved ahead for a next command
    # (cgroups, TMPDIRs, zygotes) would only be made to be discarded at exit.
    code = ("import sys; sys.argv = ['sandbox', 'run', '--approve', 'auto', '--', 'true']\n"
            "from sandbox.cli.main import main\n"
            "code = main()\n"
            "from sandbox.bash.run import reservations\n"
            "print('reserved', sum(len(held) for held in reservations._reservations.values()))\n"
            "raise SystemExit(code)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=100, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "reserved 0"
