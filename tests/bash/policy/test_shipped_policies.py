"""The shipped policies keep their own claims, proven by running them.

Every program a shipped read-only policy allows is run with every option its spec
allows (with the spec's sample value), in a scratch workspace (a git repository for
git-readonly), by bash with the policy's environment. Only the policy layer stands
here (no OS confinement): what it allows must not write.

- readonly: no file is created, changed or deleted, in the workspace or outside it
  (a scratch HOME and TMPDIR, and the workspace's parent);
- git-readonly: the repository, its refs and its config are unchanged.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import BashToolPolicy
from sandbox.bash.policy.specs import ProgramSpec
from sandbox.bash.run.gitguard import guarded_env
from sandbox.policies import resolve

OPERANDS: dict[str, list[str]] = {
    "tr": ["a", "b"], "diff": ["f.txt", "g.txt"], "cmp": ["f.txt", "g.txt"], "date": ["+%F"],
    "find": ["."], "grep": ["x", "f.txt"], "rg": ["x", "."], "echo": ["hi"], "printf": ["hi"],
    "pwd": [], "uname": [], "true": [], "ls": ["."], "df": ["."], "du": ["."], "tree": ["."],
    "git log": ["HEAD"], "git show": ["HEAD"], "git blame": ["f.txt"], "git cat-file": ["HEAD"],
    "git grep": ["x"], "git config --get": ["core.bare"], "git config --list": [],
    "git rev-parse": ["HEAD"], "git rev-list": ["HEAD"], "git describe": ["--always"],
    "git merge-base": ["HEAD", "HEAD"], "git name-rev": ["HEAD"], "git diff": ["HEAD"],
}


def _snapshot(*roots: Path) -> dict[str, str]:
    """Every file and directory under ``roots``, with a digest of each file's content
    and its mode: creating, changing or deleting anything changes the snapshot."""
    out: dict[str, str] = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            st = path.lstat()
            if path.is_file() and not path.is_symlink():
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest() + oct(st.st_mode)
            else:
                out[str(path)] = oct(st.st_mode)
    return out


def _commands(policy: BashToolPolicy) -> Iterator[str]:
    specs = policy.program_specs
    for prefix in policy.allowed_command_prefixes:
        words = prefix.split()
        spec: ProgramSpec | None = None
        for n in range(len(words), 0, -1):
            spec = specs.get(" ".join(words[:n]))
            if spec is not None:
                break
        assert spec is not None, f"{prefix!r} has no spec"
        default = [] if words[0] == "git" else OPERANDS.get(words[0], ["f.txt"])
        operands = OPERANDS.get(prefix, default)
        yield " ".join([prefix, *map(shlex.quote, operands)])
        for option, kind in spec.options.items():
            if option in spec.program_options:
                continue  # runs a program: refused by read-only policies (tested apart)
            if option == "-NUM":
                option, kind = "-2", "none"
            if option in ("(", ")", "!"):
                continue
            sample = spec.examples.get(option, "1")
            if kind == "none":
                parts = [option]
            elif kind == "optional":
                parts = [f"{option}={sample}"] if option.startswith("--") else [option]
            else:
                parts = [option, sample]
            if spec.script_options and option not in spec.script_options and words[0] == "sed":
                parts += ["-e", "p"]
            yield " ".join([prefix, *map(shlex.quote, parts), *map(shlex.quote, operands)])


def _workspace(root: Path, *, git: bool) -> Path:
    ws = root / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("b x\na y\na y\n")
    (ws / "g.txt").write_text("b x\nc z\n")
    (ws / "dates.txt").write_text("2020-01-01\n")
    (ws / "list0").write_bytes(b"f.txt\0g.txt\0")
    (ws / "d").mkdir()
    (ws / "d" / "h.txt").write_text("x\n")
    if git:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(root / "home"), "GIT_CONFIG_NOSYSTEM": "1"}
        for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                     ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one"],
                     ["tag", "v1"]):
            subprocess.run(["git", *args], cwd=ws, env=env, check=True)
        (ws / "f.txt").write_text("changed\n")  # a dirty work tree: status has work to do
    return ws


@pytest.mark.parametrize("name", ["readonly", "git-readonly"])
def test_every_allowed_option_of_a_read_only_policy_writes_nothing(
    name: str, tmp_path: Path
) -> None:
    policy = BashToolPolicy.from_toml(resolve(name))
    missing = sorted({p.split()[0] for p in policy.allowed_command_prefixes
                      if shutil.which(p.split()[0]) is None and p.split()[0] not in
                      ("echo", "printf", "true", "pwd")})
    if missing:
        pytest.fail(f"install {missing} (scripts/test.sh does) to prove {name}")
    home = tmp_path / "home"
    home.mkdir()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    ws = _workspace(tmp_path, git=name == "git-readonly")
    env = {**policy.env, "HOME": str(home), "TMPDIR": str(tmp)}
    before = _snapshot(tmp_path)
    ran = 0
    for command in _commands(policy):
        decision = policy.check(command)
        assert decision.allowed, (command, decision.reason)
        subprocess.run(["bash", "--norc", "--noprofile", "-c", command], cwd=ws, env=env,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=20, check=False)
        ran += 1
        after = _snapshot(tmp_path)
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        assert not changed, f"{command!r} changed {changed[:5]}"
    assert ran > 200  # every option of every program, not a sample


@pytest.mark.parametrize(
    ("name", "command"),
    [
        ("readonly", "sort -o out f.txt"), ("readonly", "sort --output=out f.txt"),
        ("readonly", "uniq f.txt out"), ("readonly", "tree -o out ."), ("readonly", "date -s 1"),
        ("readonly", "sort --compress-program=sh f.txt"), ("readonly", "find . -delete"),
        ("readonly", "find . -fprint out"), ("readonly", "rg --pre sh x"),
        ("git-readonly", "git branch --list --no-list -D main"),
        ("git-readonly", "git remote -v add x /tmp/x"),
        ("git-readonly", "git config --get --no-get core.fsmonitor cmd"),
        ("git-readonly", "git log --output=out"), ("git-readonly", "git diff --no-index a b"),
        ("git-readonly", "git tag --list v2"), ("git-readonly", "git stash list && git stash"),
    ],
)
def test_what_a_read_only_policy_refuses_is_named(name: str, command: str) -> None:
    decision = BashToolPolicy.from_toml(resolve(name)).check(command)
    assert not decision.allowed
    assert decision.rule in ("R7", "R2"), decision


def test_the_git_readonly_environment_keeps_status_from_writing_the_index() -> None:
    policy = BashToolPolicy.from_toml(resolve("git-readonly"))
    assert policy.env.get("GIT_OPTIONAL_LOCKS") == "0"
    assert os.fspath(resolve("git-readonly")).endswith("git-readonly.toml")


def test_a_planted_repository_config_runs_no_program_under_git_readonly(tmp_path: Path) -> None:
    """A repository's .git/config names programs git would run on a read (fsmonitor
    on status, the pager, an external diff, the signature program on
    --show-signature): the policy's environment and the git guard first on every
    command's PATH (sandbox/bash/run/gitguard.py; tests/bash/run/test_git_guard.py plants every
    route) override each of them."""
    policy = BashToolPolicy.from_toml(resolve("git-readonly"))
    ws = _workspace(tmp_path, git=True)
    marker = tmp_path / "planted-ran"
    plant = tmp_path / "plant.sh"
    plant.write_text(f"#!/bin/sh\necho \"$0 $*\" >> {marker}\ncat >/dev/null\n")
    plant.chmod(0o755)
    # a signed commit, so --show-signature has something to verify
    signer = tmp_path / "sign.sh"
    signer.write_text("#!/bin/sh\ncat >/dev/null\nprintf -- '-----BEGIN PGP SIGNATURE-----\\n"
                      "eA==\\n-----END PGP SIGNATURE-----\\n'\necho '[GNUPG:] SIG_CREATED ' >&2\n")
    signer.chmod(0o755)
    git_env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "-c", f"gpg.program={signer}", "-c", "user.name=t",
                    "-c", "user.email=t@t", "-c", "user.signingkey=t", "commit", "-qam", "two",
                    "-S"], cwd=ws, env=git_env, check=True)
    for key in ("core.fsmonitor", "core.pager", "diff.external", "gpg.program",
                "gpg.ssh.program", "core.sshCommand", "core.askPass",
                "gpg.ssh.defaultKeyCommand"):
        subprocess.run(["git", "config", key, str(plant)], cwd=ws, env=git_env, check=True)
    subprocess.run(["git", "config", "core.hooksPath", str(tmp_path)], cwd=ws, env=git_env,
                   check=True)
    env = guarded_env({**policy.env, "HOME": str(tmp_path / "home")})
    # --show-signature runs gpg: a program the command line starts, refused here
    for command in ("git log --show-signature -1", "git show --show-signature"):
        assert not policy.check(command).allowed, command
    for command in ("git status", "git diff HEAD~1", "git log -1", "git show",
                    "git log -p -1"):
        assert policy.check(command).allowed, command
        subprocess.run(["bash", "--norc", "--noprofile", "-c", command], cwd=ws, env=env,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=20, check=False)
        assert not marker.exists(), (command, marker.read_text())
    # the same repository without the policy's environment does run the planted
    # program: the test would see an override that stopped working
    subprocess.run(["git", "log", "--show-signature", "-1"], cwd=ws, env=git_env,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=20, check=False)
    assert marker.exists()
