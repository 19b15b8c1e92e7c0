"""Every `sandbox` subcommand, given bad input, says what is wrong in a sentence: never a
Python traceback. Each case runs the installed command in a real process, with no
terminal (as in CI or under an agent)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

pytestmark = pytest.mark.timeout(60)

ROOT = REPO
SANDBOX = str(Path(sys.executable).parent / "sandbox")
README = str(ROOT / "README.md")


@pytest.fixture(scope="module")
def bad(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("bad")
    (root / "a-directory").mkdir()
    (root / "syntax.toml").write_text("allowed_command_prefixes = \n")
    (root / "wrong-type.toml").write_text("allowed_command_prefixes = 5\n")
    (root / "unknown-key.toml").write_text("alowed_command_prefixes = ['ls']\n")
    (root / "log.jsonl").write_text('{"a": 1}\nnot json\n')
    (root / "binary.db").write_bytes(os.urandom(4096))
    return {"dir": str(root / "a-directory"), "syntax": str(root / "syntax.toml"),
            "type": str(root / "wrong-type.toml"), "key": str(root / "unknown-key.toml"),
            "log": str(root / "log.jsonl"), "binary": str(root / "binary.db"),
            "missing": str(root / "missing" / "x.db")}


CASES = [
    # approvals: stores that are not stores, or missing
    ("approvals list --store {readme}", "not a database"),
    ("approvals list --store {binary}", "approval store"),
    ("approvals list --store {dir}", "is a directory"),
    ("approvals list --store {missing}", "no approval store at"),
    ("approvals list --json --store {readme}", "not a database"),
    ("approvals approve cf_x --store {readme}", "not a database"),
    ("approvals approve cf_x --store {missing}", "no approval store at"),
    ("approvals deny cf_x --reason no --store {readme}", "not a database"),
    ("approvals edit cf_x --args [] --store {readme}", "not a database"),
    ("approvals rules --store {readme}", "not a database"),
    ("approvals rules revoke rule_x --store {readme}", "not a database"),
    ("approvals serve --store {readme} --port 0", "not a database"),
    ("approvals serve --store {missing} --port 0", "--create"),
    ("approvals serve --store {dir} --port 0", "is a directory"),
    # check / run: policies that are missing, not TOML, or wrong
    ("check --policy {readme} -- ls", "not valid TOML"),
    ("check --policy {syntax} -- ls", "not valid TOML"),
    ("check --policy {type} -- ls", "allowed_command_prefixes"),
    ("check --policy {key} -- ls", "alowed_command_prefixes"),
    ("check --policy {dir} -- ls", "policy"),
    ("check --policy no-such-policy -- ls", "no policy named"),
    ("check --policy missing/policy.toml -- ls", "does not exist"),
    ("check --policy readonly", "give the command after --"),
    ("run --policy {syntax} --approve deny -- ls", "not valid TOML"),
    ("run --policy no-such-policy -- ls", "no policy named"),
    ("run --approve auto --workspace {missing} -- ls", "not an existing directory"),
    ("run --approve auto --workspace {readme} -- ls", "not an existing directory"),
    ("run -- ls", "--approve auto"),
    # audit
    ("audit verify {dir}", "cannot read"),
    ("audit verify {missing}", "no such file"),
    # mcp
    ("mcp --policy {syntax}", "not valid TOML"),
    ("mcp --policy readonly --store {readme}", "not a database"),
    ("mcp --policy readonly --store {dir}", "approval store"),
    ("mcp --policy readonly --workspace {missing}", "is not a directory"),
    ("mcp --tools {readme}:X", "import"),
    ("mcp --policy readonly --approval-timeout -1", "--approval-timeout"),
]


@pytest.mark.parametrize("command,message", CASES, ids=[c for c, _ in CASES])
def test_bad_input_gets_a_sentence_not_a_traceback(bad: dict[str, str], command: str,
                                                   message: str) -> None:
    argv = [word.format(readme=README, **bad) for word in command.split()]
    proc = subprocess.run([SANDBOX, *argv], capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL, start_new_session=True, cwd=bad["dir"])
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "Traceback" not in output
    assert 'File "' not in output
    assert message in output, output
    assert output.lstrip().startswith(("sandbox", "{")), output


def test_without_a_terminal_run_names_the_options_not_classes(tmp_path: Path) -> None:
    proc = subprocess.run([SANDBOX, "run", "--policy", "readonly", "--", "cat", "x"],
                          capture_output=True, text=True, timeout=30, cwd=tmp_path,
                          stdin=subprocess.DEVNULL, start_new_session=True)
    assert proc.returncode == 125
    assert "--approve auto" in proc.stderr and "--approve deny" in proc.stderr
    assert "Provider" not in proc.stderr and "Error" not in proc.stderr
    # A command the policy lets run without approval needs no terminal.
    ok = subprocess.run([SANDBOX, "run", "--policy", "readonly", "--", "pwd"],
                        capture_output=True, text=True, timeout=30, cwd=tmp_path,
                        stdin=subprocess.DEVNULL, start_new_session=True)
    assert ok.returncode == 0 and ok.stdout.strip() == str(tmp_path)


def test_approvals_serve_creates_a_store_only_when_asked(tmp_path: Path) -> None:
    store = tmp_path / "new.db"
    refused = subprocess.run([SANDBOX, "approvals", "serve", "--store", str(store),
                              "--port", "0"], capture_output=True, text=True, timeout=30)
    assert refused.returncode == 2 and "no approval store at" in refused.stderr
    assert not store.exists()
    proc = subprocess.Popen([SANDBOX, "approvals", "serve", "--store", str(store), "--port",
                             "0", "--create"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert "Approvals page for" in proc.stdout.readline()
        assert store.exists()
    finally:
        proc.kill()
        proc.wait()
