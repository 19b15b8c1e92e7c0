"""Programs that run other programs from their own options: a spec marks them
(``runs_programs``, ``unlisted_options = "ask"``); such a command asks a human first,
and a read-only policy refuses it. And `file`, whose descriptions quote the files it
reads, asks under readonly except in its MIME forms.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sandbox.bash.policy.evaluate import BashToolPolicy
from sandbox.errors import ConfigurationError
from sandbox.policies import resolve

PYTEST_RUNS = (
    "pytest -d --tx 'popen//python=sh -c \"touch x\"'",
    "pytest --tx popen//python=sh",
    "pytest -p evil",
    "pytest -pevil",
    "pytest -vpevil",
    "pytest -q -p no:cacheprovider tests",
    "pytest --pdbcls=evil:Pdb --pdb",
    "pytest -W error::evil.Warning",
    "pytest -c other.ini",
    "pytest --config-file=other.ini",
    "pytest --rootdir=/tmp/x",
    "pytest --confcutdir=/",
    "pytest --override-ini=addopts=-pevil",
    "pytest --import-mode=importlib --pyargs os",
    "pytest --junit-xml=conftest.py",
    "pytest --dist load",
    "pytest --maxf=1",  # an abbreviation: argparse's table, not the spec's
    "pytest /usr/lib/python3/dist-packages",
    "pytest ../elsewhere/tests",
    "pytest tests && pytest -p evil",
)
PYTEST_UNASKED = (
    "pytest", "pytest -q", "pytest -x -q tests/test_a.py::test_b", "pytest -vx -k 'a and not b'",
    "pytest -m slow --maxfail=2 --tb=short -rA", "pytest --lf --collect-only -q", "pytest -n 2 tests",
    "pytest --durations 5 -s", "pytest tests/test_a.py -k x --deselect tests/test_a.py::y",
)


def test_pytest_options_that_run_programs_ask_under_python_dev() -> None:
    policy = BashToolPolicy.from_toml(resolve("python-dev"))
    for command in PYTEST_RUNS:
        decision = policy.check(command)
        if decision.allowed:
            assert policy.needs_confirmation(command), command
        else:  # the hardening table already refuses a few (-o, --basetemp)
            assert decision.rule == "R7", (command, decision.reason)
    for command in PYTEST_UNASKED:
        assert policy.check(command).allowed, (command, policy.check(command).reason)
        assert not policy.needs_confirmation(command), command


def test_git_show_signature_runs_gpg_asks_or_is_refused() -> None:
    dev = BashToolPolicy.from_toml(resolve("python-dev"))
    readonly = BashToolPolicy.from_toml(resolve("git-readonly"))
    for command in ("git log --show-signature -1", "git show --show-signature",
                    "git log -1 --show-signature | head -3"):
        assert dev.check(command).allowed and dev.needs_confirmation(command), command
        decision = readonly.check(command)
        assert not decision.allowed and decision.rule == "R7", command
        assert "read-only" in decision.reason
    assert not dev.needs_confirmation("git log -p -1")
    assert readonly.check("git log -p -1").allowed


POLICY = """
allowed_command_prefixes = ["make", "tool", "ls"]
no_confirmation_prefixes = ["make", "tool", "ls"]
program_specs = "builtin"
{fs}

[programs.make]
runs_programs = true
options = ["-n", "-s"]
why = "make runs the recipes of the Makefile"

[programs.tool]
options = ["-v", "--run"]
value_options = ["--with"]
runs_programs = ["--run", "--with"]
"""


@pytest.mark.parametrize("filesystem", ["", 'filesystem = "read-only"'])
def test_a_policy_can_mark_programs_and_options_that_run_programs(filesystem: str) -> None:
    policy = BashToolPolicy.from_toml_string(POLICY.format(fs=filesystem), source="t.toml")
    read_only = bool(filesystem)
    for command in ("make -s", "tool --run", "tool -v --with x", "tool -v --with=x", "ls; make"):
        decision = policy.check(command)
        if read_only:
            assert not decision.allowed and decision.rule == "R7", command
            assert "runs" in decision.reason, decision.reason
        else:
            assert decision.allowed, (command, decision.reason)
            assert policy.needs_confirmation(command), command
    for command in ("tool -v", "ls -l"):
        assert policy.check(command).allowed
        assert not policy.needs_confirmation(command), command
    assert not policy.check("tool --other").allowed  # unlisted: refused as before


@pytest.mark.parametrize("table, wrong", [
    ('runs_programs = ["--nope"]\noptions = ["-v"]', "not one of its options"),
    ('runs_programs = "yes"', "list of non-empty strings"),
    ('unlisted_options = "maybe"', 'must be "refuse" or "ask"'),
])
def test_a_wrong_runs_programs_entry_names_the_fix(table: str, wrong: str) -> None:
    text = f'allowed_command_prefixes = ["x"]\nprogram_specs = "builtin"\n[programs.x]\n{table}\n'
    with pytest.raises(ConfigurationError, match=wrong):
        BashToolPolicy.from_toml_string(text, source="t.toml")


def test_file_asks_under_readonly_except_in_its_mime_forms(tmp_path: Path) -> None:
    """`file` prints a script's whole #! line with its arguments and the name gzip
    stored: contents of the file, which readonly shows only after a confirmation."""
    policy = BashToolPolicy.from_toml(resolve("readonly"))
    for command in ("file s", "file -b s", "file -L s", "file -k x.gz", "file s --mime-type"):
        assert policy.check(command).allowed
        assert policy.needs_confirmation(command), command
    for command in ("file --mime-type s x.gz", "file -i s", "file --mime-encoding -b s",
                    "file --mime s"):
        assert policy.check(command).allowed
        assert not policy.needs_confirmation(command), command
    for command in ("file -z x.gz", "file -bz x.gz", "file --uncompress x.gz", "file -Z x.gz"):
        assert not policy.check(command).allowed, command  # -z starts decompressors


@pytest.mark.needs_program("file", "gzip")
def test_file_prints_a_scripts_shebang_line_except_in_its_mime_forms(tmp_path: Path) -> None:
    """Why plain `file` asks under readonly and its MIME forms do not (the test above)."""
    (tmp_path / "s").write_text("#!/usr/bin/env secret-token --x\n")
    subprocess.run(["gzip"], input=b"x", stdout=(tmp_path / "x.gz").open("wb"), check=True)
    described = subprocess.run(["file", "s"], cwd=tmp_path, capture_output=True, text=True)
    assert "secret-token" in described.stdout  # why plain `file` asks
    mime = subprocess.run(["file", "--mime-type", "-i", "s"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert "secret-token" not in mime.stdout
