"""What a newcomer meets in the first hour: the policy's sizes and messages, the demo."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sandbox import BashToolPolicy
from sandbox.errors import ConfigurationError

SANDBOX = str(Path(sys.executable).parent / "sandbox")


def test_sizes_are_written_the_same_in_python_as_in_a_policy_file(tmp_path: Path) -> None:
    policy = BashToolPolicy(max_memory_bytes="1GiB", max_file_size_bytes="16MiB",
                            max_output_bytes="4KiB")
    assert (policy.max_memory_bytes, policy.max_file_size_bytes, policy.max_output_bytes) == (
        1 << 30, 16 << 20, 4 << 10)
    toml = tmp_path / "p.toml"
    toml.write_text('allowed_command_prefixes = ["*"]\nmax_memory_bytes = "1GiB"\n'
                    'max_file_size_bytes = "16MiB"\nmax_output_bytes = "4KiB"\n')
    assert BashToolPolicy.from_toml(toml) == policy
    assert BashToolPolicy(max_memory_bytes="1GB").max_memory_bytes == 10**9
    with pytest.raises(ConfigurationError, match=r"max_file_size_bytes='lots' is invalid"):
        BashToolPolicy(max_file_size_bytes="lots")


def test_a_blocked_redirection_gets_advice_that_fits_a_redirection() -> None:
    policy = BashToolPolicy(allowed_command_prefixes=("echo", "wc"),
                            blocked_operators=(">", ";", "<"))
    write = policy.check("echo hi > out.txt")
    assert write.rule == "R1"
    assert "drop the redirection" in write.reason
    assert "one command per call" not in write.reason
    assert "argument" in policy.check("wc -l < notes").reason
    assert "one command per call" in policy.check("echo a; echo b").reason


def test_the_demo_blocks_its_newline_case_because_of_the_newline() -> None:
    out = subprocess.run([SANDBOX, "demo"], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    [line] = [x for x in out.splitlines() if "\\n" in x and "check" in x]
    assert "BLOCK" in line
    assert "blocked by R1" in line and "a newline" in line
