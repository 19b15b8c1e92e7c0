"""The argv-recording differential fuzzer, on a derandomized budget.

bench/fuzz_argv.py puts recorder stubs on PATH and runs every command `check` allowed
in bash; each stub logs its argv. A program that ran with words `check` did not
report (a hidden argument can carry an option past a program spec) is a divergence.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.paths import REPO

BENCH = REPO / "bench" / "fuzz_argv.py"


def _fuzzer():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("fuzz_argv", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fuzz_argv", module)  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module


def test_the_oracle_records_hidden_arguments() -> None:
    """The stubs must log what bash passed, or a green run means nothing."""
    fuzz = _fuzzer()
    oracle = fuzz.Oracle()
    try:
        runs = oracle.run(["a x{},y} 1", "b -n 'q r'", "a <&- l", "x; true"])
    finally:
        oracle.close()
    assert runs[0] == [["a", "x}", "xy", "1"]]
    assert runs[1] == [["b", "-n", "q r"]]
    assert runs[2] == [["a", "l"]]
    assert runs[3] == [["x"]]
    # and the comparison flags an argument check did not report
    assert not fuzz.explained(["a", "x}", "xy", "1"], [("a", ("a", "x{},y}", "1"))])
    # a word check could not know (None) explains whatever bash made of it: the policy
    # and the program specs treat such words as unknown, never as a given value
    assert fuzz.explained(["a", "x}", "xy", "1"], [("a", ("a", None, "1"))])


@pytest.mark.timeout(300)
def test_no_argument_divergence_on_a_fixed_budget() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--cases", "40000", "--seed", "20261123", "--jobs", "2"],
        capture_output=True, text=True, timeout=280, check=False,
    )
    summary = [line for line in proc.stdout.splitlines() if line.startswith("cases=")]
    assert summary, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "cases=40000" in summary[-1], summary
    assert proc.returncode == 0, proc.stdout[-3000:]
    allowed = int(summary[-1].split("allowed=")[1].split()[0])
    assert allowed > 1500, "the grammar must produce commands the policy allows"


def test_the_runner_family_sees_a_program_that_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Programs that run programs: the recorder must see a planted route or an option
    start a stub, or a green run means nothing."""
    fuzz = _fuzzer()
    runners = fuzz.RunnerOracle()
    try:
        # an option that loads a plugin starts the stub (check makes a human confirm it)
        assert ["x", "plug"] in runners.run("python-dev", "pytest -q -p plug test_a.py")
        assert fuzz.runner_reported(runners.policies["python-dev"], "pytest -p plug") is None
        assert fuzz.runner_reported(runners.policies["python-dev"], "pytest -q") is not None
        # with the git guard, the planted repository runs nothing
        for command in ("git log -p -1", "git diff", "git status"):
            assert runners.run("git-readonly", command) == [], command
        assert runners.run("python-dev", "cd vendor/lib.git && git log -p") == []
        # without it, the repository's routes do start the stub
        monkeypatch.setattr(fuzz, "guarded_env", dict)
        assert runners.run("git-readonly", "git log -p -1")
        assert runners.run("python-dev", "git diff")
    finally:
        runners.close()
    rng = fuzz.random.Random(5)
    generated = [fuzz.runner_case(rng)[1] for _ in range(400)]
    for needle in ("--tx", "-p", "--ext-diff", "--textconv", "vendor/lib.git", "file -z",
                   "--show-signature"):
        assert any(needle in c for c in generated), needle
