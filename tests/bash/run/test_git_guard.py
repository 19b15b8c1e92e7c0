"""The git guard (sandbox/bash/run/gitguard.py, sandbox/bash/guard/git): no configuration
route from a repository the agent did not write runs a program, whichever repository
git finds, under both shipped git policies; and `git diff` still works.

Every route is planted in a repository made here with plain git (the agent did not
write it): drivers that .gitattributes selects (textconv, external diff command,
clean/smudge/process filters, merge drivers), fsmonitor, hooks, pagers, editors,
credential helpers, ssh and askpass commands, signing programs, `!` aliases, and the
same through include.path and includeIf; then a bare repository committed inside the
project. The planted program leaves a marker file and prints a marker line on
stderr (git passes a driver's stderr through), so a run inside the read-only
confinement, where the file cannot be written, is seen too. Each test also runs the
same command without the guard and sees the marker: the test can fail.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sandbox.bash.policy.evaluate import BashToolPolicy
from sandbox.bash.run.gitguard import guard_dir, guarded_env
from sandbox.bash.tool import ExecuteBashTool
from sandbox.policies import resolve

pytestmark = pytest.mark.needs_program("git")

MARK = "PLANTED-PROGRAM-RAN"
PLAIN = {"PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1", "LANG": "C.UTF-8"}

# every key git reads as a program (or a shell command line), with the commands that use it
PROGRAM_KEYS = (
    "core.fsmonitor", "core.pager", "pager.log", "pager.diff", "pager.show", "pager.status",
    "diff.external", "core.editor", "sequence.editor", "core.sshCommand", "core.askPass",
    "credential.helper", "gpg.program", "gpg.ssh.program", "gpg.x509.program",
    "gpg.ssh.defaultKeyCommand", "diff.evil.textconv", "diff.evil.command",
    "filter.evil.clean", "filter.evil.smudge", "merge.evil.driver",
    "core.alternateRefsCommand", "credential.https://example.com.helper",
)


def _plant_program(root: Path) -> tuple[Path, Path]:
    """A program committed inside the project (readable inside the confinement)."""
    ws = root / "ws"
    (ws / "tools").mkdir(parents=True)
    marker = ws / "planted-ran"
    plant = ws / "tools" / "plant.sh"
    # the marker is put together when it runs: the script's own text (shown by git log
    # -p, since it is committed) does not hold it
    plant.write_text("#!/bin/sh\necho \"PLANTED-\"\"PROGRAM-RAN $0 $*\" >&2\necho \"$0 $*\" >> {marker} 2>/dev/null\n"
                     "cat 2>/dev/null\nexit 0\n".replace("{marker}", str(marker)))
    plant.chmod(0o755)
    return plant, marker


def _git(cwd: Path, *args: str, home: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, env={**PLAIN, "HOME": str(home)}, check=True,
                   stdout=subprocess.DEVNULL)


def _hostile_repository(root: Path, plant: Path, *, bare_inside: bool = True) -> Path:
    """A workspace whose repository config names `plant` on every route."""
    home = root / "home"
    home.mkdir(exist_ok=True)
    ws = root / "ws"
    (ws / "f.txt").write_text("a\n")
    (ws / "inc.txt").write_text("a\n")
    (ws / "cond.txt").write_text("a\n")
    (ws / ".gitattributes").write_text(
        "f.txt diff=evil filter=evil merge=evil\ninc.txt diff=inc filter=inc\n"
        "cond.txt diff=cond\n")
    _git(ws, "init", "-q", "-b", "main", home=home)
    _git(ws, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A", home=home)
    _git(ws, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one", home=home)
    hooks = ws / "tools" / "hooks"
    hooks.mkdir(exist_ok=True)
    for hook in ("pre-commit", "post-commit", "post-checkout", "commit-msg", "prepare-commit-msg",
                 "pre-auto-gc", "post-index-change", "reference-transaction", "post-rewrite",
                 "fsmonitor-watchman", "pre-push", "post-merge"):
        (hooks / hook).symlink_to(plant)
    _plant_config(ws, plant, home=home)
    _git(ws, "config", "core.hooksPath", str(hooks), home=home)
    _git(ws, "config", "user.name", "t", home=home)
    _git(ws, "config", "user.email", "t@t", home=home)
    _git(ws, "config", "filter.evil.process", str(plant), home=home)
    _git(ws, "config", "filter.evil.required", "true", home=home)
    _git(ws, "config", "alias.st", f"!{plant}", home=home)
    _git(ws, "config", "trailer.evil.command", str(plant), home=home)
    included = ws / "tools" / "included.cfg"
    included.write_text(f"[diff \"inc\"]\n\ttextconv = {plant}\n[filter \"inc\"]\n"
                        f"\tclean = {plant}\n\tsmudge = {plant}\n[core]\n\tfsmonitor = {plant}\n")
    _git(ws, "config", "include.path", "../tools/included.cfg", home=home)
    cond = ws / "tools" / "cond.cfg"
    cond.write_text(f"[diff \"cond\"]\n\ttextconv = {plant}\n")
    _git(ws, "config", f"includeIf.gitdir:{ws}/.git.path", str(cond), home=home)
    # a dirty work tree: status and diff have work to do (clean filters, textconv)
    for name in ("f.txt", "inc.txt", "cond.txt"):
        (ws / name).write_text("a\nb\n")
    if bare_inside:
        _bare_inside(ws, plant, home=home)
    return ws


def _plant_config(repo: Path, plant: Path, *, home: Path) -> None:
    for key in PROGRAM_KEYS:
        _git(repo, "config", key, str(plant), home=home)


def _bare_inside(ws: Path, plant: Path, *, home: Path) -> None:
    """vendor/lib.git: a bare repository committed as ordinary files of the project."""
    src = ws.parent / "libsrc"
    src.mkdir()
    (src / "l.txt").write_text("l\n")
    (src / ".gitattributes").write_text("* diff=evil\n")
    _git(src, "init", "-q", "-b", "main", home=home)
    _git(src, "add", "-A", home=home)
    _git(src, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "lib", home=home)
    (src / "l.txt").write_text("l\nm\n")
    _git(src, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "lib2", home=home)
    (ws / "vendor").mkdir()
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(ws / "vendor" / "lib.git")],
                   env={**PLAIN, "HOME": str(home)}, check=True)
    bare = ws / "vendor" / "lib.git"
    _plant_config(bare, plant, home=home)
    (bare / "info").mkdir(exist_ok=True)
    (bare / "info" / "attributes").write_text("* diff=evil filter=evil\n")


async def _run(policy: BashToolPolicy, ws: Path, command: str) -> dict[str, object]:
    assert policy.check(command).allowed, (command, policy.check(command).reason)
    tool = ExecuteBashTool(workspace=ws, policy=policy)
    result: dict[str, object] = await tool._run(command)
    return result


def _unguarded(policy: BashToolPolicy, ws: Path, command: str, home: Path) -> str:
    """The command with the policy's environment but not the guard (no confinement)."""
    env = {**policy.env, "HOME": str(home)}
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", command], cwd=ws, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    return proc.stdout + proc.stderr


READ_COMMANDS = ("git status", "git diff", "git diff HEAD", "git log -p", "git show",
                 "git blame f.txt", "git log -p --stat -1", "git show HEAD:f.txt",
                 "git diff --stat", "git grep -n a", "git log --show-signature -1")


@pytest.mark.parametrize("name", ["git-readonly", "python-dev"])
def test_no_route_in_a_planted_repository_config_runs_a_program(
        tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = BashToolPolicy.from_toml(resolve(name))
    plant, marker = _plant_program(tmp_path)
    ws = _hostile_repository(tmp_path, plant)
    commands = [c for c in READ_COMMANDS if policy.check(c).allowed]
    if name == "python-dev":
        commands += ["git add f.txt && git commit -m two",
                     "git branch side && git switch side && git switch main",
                     "git stash && git stash pop", "git restore inc.txt", "git stash list"]
    assert len(commands) >= 8, commands
    for command in commands:
        result = asyncio.run(_run(policy, ws, command))
        out = f"{result.get('stdout')}{result.get('stderr')}{result.get('error', '')}"
        assert MARK not in out, (name, command, out)
        assert not marker.exists(), (name, command, marker.read_text())
        # the command did its work: a refusal to run at all would prove nothing
        assert result["returncode"] == 0, (name, command, result)
    # a bare repository committed inside the project is not used by discovery
    if name == "python-dev":
        result = asyncio.run(_run(policy, ws, "cd vendor/lib.git && git log -p"))
        assert result["returncode"] == 128 and "safe.bareRepository" in str(result["stderr"])
        assert MARK not in str(result["stdout"]) + str(result["stderr"])
    # the control: the same tool with the guard taken out runs the planted program
    monkeypatch.setattr("sandbox.bash.tool.guarded_env", dict)
    result = asyncio.run(_run(policy, ws, "git log -p -1"))
    assert MARK in str(result["stderr"]), result


@pytest.mark.parametrize("name", ["git-readonly", "python-dev"])
def test_git_diff_works_on_an_unstaged_change(tmp_path: Path, name: str) -> None:
    """The shipped diff.external="" override made every `git diff` with a change fail
    with "external diff died" (git 2.39); the guard gives git diff --no-ext-diff."""
    policy = BashToolPolicy.from_toml(resolve(name))
    home = tmp_path / "home"
    home.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("a\n")
    _git(ws, "init", "-q", "-b", "main", home=home)
    _git(ws, "add", "-A", home=home)
    _git(ws, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one", home=home)
    (ws / "f.txt").write_text("a\nb\n")
    for command in ("git diff", "git diff HEAD", "git diff --stat", "git diff f.txt"):
        result = asyncio.run(_run(policy, ws, command))
        assert result["returncode"] == 0, (command, result)
        assert "external diff died" not in str(result["stderr"])
        assert ("+b" in str(result["stdout"])) or ("1 +" in str(result["stdout"])), result


GUARD_ROUTES = (
    # (command, what it exercises); run by bash with the guard, no policy check
    ("git log -p", "the workspace repository"),
    ("cd vendor/lib.git && git log -p", "a bare repository found by discovery"),
    ("git -C vendor/lib.git log -p", "-C into the bare repository"),
    ("git --git-dir=vendor/lib.git log -p", "--git-dir names the bare repository"),
    ("GIT_DIR=vendor/lib.git git log -p", "GIT_DIR names the bare repository"),
    ("cd sub && git diff", "discovery from a subdirectory"),
    ("GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0=$PLANT git status",
     "GIT_CONFIG_* in the environment"),
    ("GIT_CONFIG_PARAMETERS=\"'core.fsmonitor'='$PLANT'\" git status", "GIT_CONFIG_PARAMETERS"),
    ("GIT_EXTERNAL_DIFF=$PLANT git diff", "GIT_EXTERNAL_DIFF"),
    ("GIT_EDITOR=$PLANT git commit --allow-empty", "GIT_EDITOR"),
    ("git st", "a ! alias"),
    ("git commit --allow-empty -m x --trailer 'evil: y'", "a trailer command"),
    ("git diff --ext-diff", "--ext-diff"),
    ("git log -p --ext-diff --textconv", "--textconv"),
    ("git checkout -- f.txt inc.txt", "smudge filters"),
    ("git add -A && git -c user.name=t commit -m x", "-c on the command line"),
    ("git add -A && git commit -m x", "hooks, signing"),
    ("git merge-file f.txt f.txt f.txt; git stash; git stash pop", "merge drivers"),
)


@pytest.mark.parametrize("command, route", GUARD_ROUTES, ids=[r for _, r in GUARD_ROUTES])
def test_the_guard_closes_every_route_whichever_repository_git_finds(
        tmp_path: Path, command: str, route: str) -> None:
    plant, marker = _plant_program(tmp_path)
    ws = _hostile_repository(tmp_path, plant)
    (ws / "sub").mkdir()
    (ws / "sub" / "s.txt").write_text("s\n")
    env = guarded_env({**PLAIN, "HOME": str(tmp_path / "home"), "PLANT": str(plant),
                       "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", command], cwd=ws, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert MARK not in proc.stdout + proc.stderr, (route, proc.stdout, proc.stderr)
    assert not marker.exists(), (route, marker.read_text())


def test_without_the_guard_those_routes_do_run_programs(tmp_path: Path) -> None:
    """The control: the planted repository runs the program for plain git."""
    plant, marker = _plant_program(tmp_path)
    ws = _hostile_repository(tmp_path, plant)
    env = {**PLAIN, "HOME": str(tmp_path / "home")}
    for command in ("git log -p -1", "cd vendor/lib.git && git log -p -1", "git status"):
        if marker.exists():
            marker.unlink()
        proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", command], cwd=ws, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
        assert MARK in proc.stdout + proc.stderr or marker.exists(), command


def test_the_guard_is_first_on_path_and_reachable_by_every_user() -> None:
    env = guarded_env({"PATH": "/usr/bin:/bin"})
    assert env["PATH"].split(":")[0] == guard_dir()
    assert guarded_env(env)["PATH"] == env["PATH"]  # once
    script = Path(guard_dir()) / "git"
    assert os.access(script, os.X_OK)
    assert script.stat().st_mode & 0o005 == 0o005


def test_the_guard_refuses_help_which_starts_a_manual_page_viewer(tmp_path: Path) -> None:
    env = guarded_env({**PLAIN, "HOME": str(tmp_path)})
    for command in ("git log --help", "git help log", "git -c core.pager=x log",
                    "git grep -Ox a", "git grep --open-files-in-pager=x a", "git difftool",
                    "git mergetool", "git --exec-path=. log", "git --config-env=core.pager=X log"):
        proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", command], cwd=tmp_path,
                              env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=30)
        assert proc.returncode == 129, (command, proc)
        assert "sandbox git guard" in proc.stderr


def test_a_submodule_config_runs_nothing_either(tmp_path: Path) -> None:
    """git runs a `git status` of its own in each submodule, which reads that
    submodule's config (here a clean filter and a textconv): the child git passes
    through the guard too (GIT_EXEC_PATH is a shadow whose git is the guard)."""
    home = tmp_path / "home"
    home.mkdir()
    env = {**PLAIN, "HOME": str(home)}
    marker = tmp_path / "planted-ran"
    plant = tmp_path / "plant.sh"
    plant.write_text(f"#!/bin/sh\necho ran >> {marker}\ncat\n")
    plant.chmod(0o755)
    sub, sup = tmp_path / "sub", tmp_path / "sup"
    sub.mkdir()
    (sub / "a.txt").write_text("a\n")
    (sub / ".gitattributes").write_text("* filter=evil diff=evil\n")
    who = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "protocol.file.allow=always"]
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], [*who, "commit", "-qm", "s"]):
        subprocess.run(["git", *args], cwd=sub, env=env, check=True)
    sup.mkdir()
    for args in (["init", "-q", "-b", "main"], [*who, "submodule", "-q", "add", str(sub), "sub"],
                 [*who, "commit", "-qm", "sup"]):
        subprocess.run(["git", *args], cwd=sup, env=env, check=True, capture_output=True)
    inner = sup / "sub"
    for key in ("filter.evil.clean", "diff.evil.textconv"):
        subprocess.run(["git", "config", key, str(plant)], cwd=inner, env=env, check=True)
    (inner / "a.txt").write_text("b\n")  # same size: git must run the filter to compare
    os.utime(inner / "a.txt", (946684800, 946684800))  # stat data differs: git must clean it
    # .gitmodules may ask for the submodule to be looked into whatever the config says
    (sup / ".gitmodules").write_text(
        (sup / ".gitmodules").read_text() + "\tignore = none\n")
    commands = ("git status", "git diff", "git diff --submodule=diff",
                "git status --ignore-submodules=none", "git -C sub diff", "cd sub && git log -p")
    for command in commands:
        os.utime(inner / "a.txt", (946684800, 946684800))  # work to do, every time
        proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", command], cwd=sup,
                              env=guarded_env(env), capture_output=True, text=True, timeout=60)
        assert not marker.exists(), (command, proc.stdout, proc.stderr)
    # the control: plain git runs the submodule's filter from the superproject
    os.utime(inner / "a.txt", (946684800, 946684800))
    subprocess.run(["git", "status"], cwd=sup, env=env, capture_output=True, timeout=60)
    assert marker.exists()


def test_a_git_that_bypasses_the_guard_refuses_to_work(tmp_path: Path) -> None:
    """/usr/bin/git by absolute path (from code a policy runs, such as Python), or a
    guard out of the command's reach: git stops, naming the guard, instead of reading
    the repository's config unguarded."""
    plant, marker = _plant_program(tmp_path)
    ws = _hostile_repository(tmp_path, plant, bare_inside=False)
    real = shutil.which("git")
    assert real is not None
    env = guarded_env({**PLAIN, "HOME": str(tmp_path / "home")})
    for command in (f"{real} log -p -1", f"{real} status", f"{real} diff"):
        proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", command], cwd=ws, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=30)
        assert proc.returncode == 128, (command, proc.stderr)
        assert "sandbox git guard" in proc.stderr
        assert MARK not in proc.stderr and not marker.exists(), command
    ok = subprocess.run(["bash", "--norc", "--noprofile", "-c", "git log -1 --oneline"], cwd=ws,
                        env=env, capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0, ok.stderr  # through the guard it works


# a signed commit of each kind git verifies: the header names the program it runs
_SIGNATURES = {
    "openpgp": "-----BEGIN PGP SIGNATURE-----\n \n iQEzBAABCAAdFiEE\n -----END PGP SIGNATURE-----",
    "ssh": "-----BEGIN SSH SIGNATURE-----\n U1NIU0lH\n -----END SSH SIGNATURE-----",
    "x509": "-----BEGIN SIGNED MESSAGE-----\n MIIB\n -----END SIGNED MESSAGE-----",
}


def _signed_repository(root: Path) -> tuple[Path, Path]:
    """A repository whose commits carry signatures, whose config shows them in every
    `git log` (format.pretty, pretty.<name>), with a signature program of each kind
    first on the PATH the test gives the policy: each leaves a marker when it runs."""
    home = root / "home"
    home.mkdir()
    ws = root / "ws"
    ws.mkdir()
    bindir = ws / "bin"
    bindir.mkdir()
    marker = ws / "signature-program-ran"
    for prog in ("gpg", "gpgsm", "ssh-keygen"):
        fake = bindir / prog
        fake.write_text(f"#!/bin/sh\necho \"PLANTED-\"\"PROGRAM-RAN {prog}\" >&2\n"
                        f"echo {prog} >> {marker} 2>/dev/null\nexit 1\n")
        fake.chmod(0o755)
    (ws / "f.txt").write_text("a\n")
    _git(ws, "init", "-q", "-b", "main", home=home)
    _git(ws, "-c", "user.name=t", "-c", "user.email=t@t", "add", "f.txt", home=home)
    _git(ws, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one", home=home)
    env = {**PLAIN, "HOME": str(home)}
    parent = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ws, env=env, check=True,
                            capture_output=True, text=True).stdout.strip()
    tree = subprocess.run(["git", "rev-parse", "HEAD^{tree}"], cwd=ws, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()
    for kind, sig in _SIGNATURES.items():
        body = (f"tree {tree}\nparent {parent}\nauthor t <t@t> 1700000000 +0000\n"
                f"committer t <t@t> 1700000000 +0000\ngpgsig {sig}\n\nsigned {kind}\n")
        parent = subprocess.run(["git", "hash-object", "-t", "commit", "-w", "--stdin"],
                                cwd=ws, env=env, input=body, check=True, capture_output=True,
                                text=True).stdout.strip()
    _git(ws, "update-ref", "refs/heads/main", parent, home=home)
    _git(ws, "config", "format.pretty", "%h %G? %GS %s %GG", home=home)
    _git(ws, "config", "pretty.sig", "%h %G? %GK %GF %GG", home=home)
    _git(ws, "config", "gpg.ssh.allowedSignersFile", str(ws / "f.txt"), home=home)
    return ws, marker


@pytest.mark.parametrize("name", ["git-readonly", "python-dev"])
def test_a_format_that_shows_signatures_runs_no_signature_program(
        tmp_path: Path, name: str) -> None:
    """%G? and friends make git verify the signature, with gpg, gpgsm or ssh-keygen, in
    any `git log` whose format shows one: on the command line or from the repository's
    own format.pretty / pretty.<name>. Only --show-signature (which asks) runs them.
    %GG shows what the program printed: seen inside the read-only confinement too."""
    import dataclasses

    ws, marker = _signed_repository(tmp_path)
    base = BashToolPolicy.from_toml(resolve(name))
    policy = dataclasses.replace(
        base, env={**base.env, "PATH": f"{ws / 'bin'}:{base.env['PATH']}"})
    commands = ["git log", "git log --format='%G?%GS%GG'", "git log --pretty=sig",
                "git show -s '--format=%G?%GG'", "git log --format='%G? %GK %GG' -3"]
    for command in commands:
        assert policy.check(command).allowed and not policy.needs_confirmation(command), command
        result = asyncio.run(_run(policy, ws, command))
        out = f"{result.get('stdout')}{result.get('stderr')}{result.get('error', '')}"
        assert MARK not in out, (name, command, out)
        assert not marker.exists(), (name, command, marker.read_text())
        assert result["returncode"] == 0, (name, command, result)
    # the control: asked for, the signature program runs (the fakes are the ones git finds)
    if policy.check("git log --show-signature -3").allowed:
        result = asyncio.run(_run(policy, ws, "git log --show-signature -3"))
        assert MARK in f"{result['stdout']}{result['stderr']}", result


_FORKED = r"""
import os, sys
from sandbox.bash.run.gitguard import guard_dir
parent = guard_dir()
pid = os.fork()
if pid == 0:
    print(guard_dir() == parent, flush=True)  # a tool built before the fork reads it
    sys.exit(0)  # a normal exit: the atexit handlers inherited from the parent run
_, status = os.waitpid(pid, 0)
print(os.path.isdir(parent), os.path.isfile(os.path.join(parent, "git")), flush=True)
"""


def test_a_forked_child_that_exits_leaves_its_parents_guard_in_place() -> None:
    """The guard's directory was removed by an atexit handler every forked child
    inherited (a worker forked from a preloaded server, a fork that exits with
    sys.exit): after the first such child exited, every git of the parent's commands
    failed (``bad boolean config value ... for 'core.bare'``), and the directory its
    PATH names first could be made again, with a ``git`` in it, by another local user.
    Only the process that made the guard removes it."""
    import sys

    done = subprocess.run([sys.executable, "-c", _FORKED], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True"], done.stdout + done.stderr


_PARENT_EXITS = r"""
import os, sys, time
from sandbox.bash.run.gitguard import guard_dir
parent = guard_dir()
read, write = os.pipe()
if os.fork() == 0:  # the child outlives its parent (a daemon's double fork)
    os.read(read, 1)
    time.sleep(0.5)
    print(os.path.isdir(os.path.join(guard_dir(), "exec")), flush=True)
    os._exit(0)
os.write(write, b"x")
sys.exit(0)
"""


@pytest.mark.xfail(strict=True, reason=(
    "the guard's directory belongs to the process that made it and goes when it exits; "
    "a forked child still using an ExecuteBashTool built before the fork (whose "
    "readable_paths name that directory, sandbox/bash/tool.py, in flight elsewhere) "
    "then has every git fail, and a PATH entry in /tmp another user may make again"))
def test_a_child_that_outlives_its_parent_keeps_a_guard() -> None:
    import sys

    done = subprocess.run([sys.executable, "-c", _PARENT_EXITS], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.stdout.split() == ["True"], done.stdout + done.stderr


_TERMINATED = r"""
import os, signal, sys
from sandbox.bash.run.gitguard import guard_dir
print(guard_dir(), flush=True)
os.kill(os.getpid(), signal.SIGTERM)  # how an MCP host stops `sandbox mcp`
"""


@pytest.mark.xfail(strict=True, reason=(
    "the guard's directory is removed by an atexit handler only; a process ended by "
    "SIGTERM (Python's default action: no atexit), e.g. `sandbox mcp` stopped by its "
    "host, or SIGKILL leaves it in /tmp (~300 entries each). Fix: have the spawner, "
    "which sees its agent die and removes its TMPDIRs, remove it too"))
def test_a_terminated_agent_leaves_no_guard_behind() -> None:
    import sys

    done = subprocess.run([sys.executable, "-c", _TERMINATED], capture_output=True,
                          text=True, timeout=60, check=False)
    made = done.stdout.strip()
    assert made.startswith(("/tmp/", os.environ.get("TMPDIR", "/tmp"))), done.stderr
    try:
        assert not os.path.exists(made)
    finally:
        shutil.rmtree(made, ignore_errors=True)
