"""The differential fuzzer, on a derandomized budget: bash itself is the oracle.

bench/fuzz_policy.py generates bash from a grammar (every quoting form, expansions,
[[ ]], (( )), heredocs, case, substitutions, coproc, functions, line continuations,
control characters, with noise spliced into fragile token boundaries), checks each
command, and runs every allowed one in bash with a recording command_not_found_handle.
A program bash started that `check` did not report is a divergence.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

BENCH = REPO / "bench" / "fuzz_policy.py"


def _fuzzer():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("fuzz_policy", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_oracle_sees_a_hidden_command() -> None:
    """The harness must report what bash ran, or a green fuzz run means nothing."""
    import tempfile

    fuzz = _fuzzer()
    with tempfile.TemporaryDirectory() as tmp:
        ran = fuzz.run_bash(
            ["a $'\\\\';x;b \\'", "a 'x'", "b $(y) <(x)", "a; eval b", "a $(cd /)", "true"],
            Path(tmp))
    assert ran[0] == {"a", "x", "b"}
    assert ran[1] == {"a"}
    assert ran[2] == {"b", "x", "y"}
    assert ran[3] == {"a", "eval", "b"}
    assert ran[4] == {"a", "cd"}
    assert 5 not in ran


@pytest.mark.timeout(300)
def test_no_divergence_on_a_fixed_budget() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--cases", "40000", "--seed", "20261123", "--jobs", "2"],
        capture_output=True, text=True, timeout=280, check=False,
    )
    assert "cases: 40000" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stdout
    allowed = int(proc.stdout.split("allowed and run by bash: ")[1].split()[0])
    assert allowed > 2000, "the grammar must produce commands the policy allows"
