"""Parsing that could crash or stall the agent happens in the guard child: a crash there refuses the command, deep nesting goes there too, and code points that crash tree-sitter-bash are refused before parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox import BashToolPolicy

pytestmark = pytest.mark.timeout(30)


def test_a_parser_crash_in_the_guard_child_refuses_the_command_without_parsing_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # tree-sitter-bash once crashed a whole test process on a large crafted command: the
    # guard child takes that risk, and a crash there must never lead to parsing here.
    from sandbox.bash.syntax import grammar, guard
    from sandbox.bash.syntax import parse as parse_module

    monkeypatch.setattr(guard, "_GUARD_CODE",
                        "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")

    def no_parsing_here() -> None:
        raise AssertionError("parsed in the agent's process after the child crashed")

    monkeypatch.setattr(grammar, "_parser", no_parsing_here)
    monkeypatch.setattr(parse_module, "_parser", no_parsing_here)
    command = "echo " + "a " * 4000
    decision = BashToolPolicy().check(command)
    assert not decision.allowed and decision.rule == "R6" and "crashed" in decision.reason


def test_a_short_but_deeply_nested_command_is_also_parsed_in_the_guard_child(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sandbox.bash.syntax import guard
    from sandbox.bash.syntax import parse as parse_module

    monkeypatch.setattr(guard, "_GUARD_CODE",
                        "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    command = "echo " + "$(" * 400 + "ls" + ")" * 400
    assert len(command.encode()) < parse_module.GUARDED_PARSE_ABOVE
    decision = BashToolPolicy().check(command)
    assert not decision.allowed and "crashed" in decision.reason
    assert BashToolPolicy(allowed_command_prefixes=("ls",)).check("ls -la").allowed


def test_code_points_that_crash_tree_sitter_bash_are_refused_before_parsing() -> None:
    # tree-sitter-bash 0.25.1 segfaults (an out-of-bounds read, so only some runs) on
    # `{` followed by code points of planes 3-16; run in a child so a regression
    # fails this test instead of killing the test process.
    import subprocess
    import sys

    script = (
        "from sandbox import BashToolPolicy\n"
        "p = BashToolPolicy()\n"
        "bad = ['x{\\U000e0001h)', '{\\U000e0000,b}', 'x{\\U000dffffh)', "
        "'UD{\\U00031894\\U000a2779\\x93h)\\U000f18c2|h)']\n"
        "for _ in range(30):\n"
        "    for cmd in bad:\n"
        "        d = p.check(cmd)\n"
        "        assert not d.allowed and d.rule == 'R6', d\n"
        "assert p.check('echo \"\\U0001f389 \\U00020000\"').allowed\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_the_parse_worker_imports_nothing_but_its_package_from_the_packages_directory(
        tmp_path: Path) -> None:
    """See tests/bash/linux/test_spawner.py: a module an agent plants beside the
    `sandbox` package under a name the standard library probes for is not run by the
    parse worker (started with ``-I -S`` and the package's directory)."""
    import subprocess
    import sys

    from sandbox.bash.syntax import guard
    from tests.bash.linux.test_spawner import _planted_root

    root, marker = _planted_root(tmp_path)
    worker = subprocess.run(
        [sys.executable, "-I", "-S", "-c", guard._GUARD_CODE + "print('served')\n",
         str(root), *guard._GUARD_PATHS],
        input=b"", capture_output=True, cwd="/", env={}, timeout=60, check=False)
    assert b"served" in worker.stdout, worker.stderr.decode(errors="replace")
    assert not marker.exists(), marker.read_text()
