"""Protected paths (issue 16, item 3): control files inside the writable workspace that
no command may change, whatever program writes, enforced by the OS.

Each attack runs as a script the policy cannot see into (``bash .attack.sh``), so only
the OS stands in its way; then the *host* runs git in the workspace, as a user or an
editor would, and must run nothing the command planted. Every attack also runs with
``protected_paths=()`` (the control): there it must land, which shows that the test
fails without the protection.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from sandbox import BashToolPolicy, ExecuteBashTool, ToolConfirmation, ToolContext
from sandbox.bash.linux import confinement, protected, protected_apply
from sandbox.bash.run import reservations
from sandbox.errors import ConfigurationError, PolicyFileError
from tests.paths import REPO

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

ROOT = os.geteuid() == 0
needs_root = pytest.mark.needs_root  # makes a throwaway user; measured as root
needs_git = pytest.mark.needs_program("git")
needs_mounts = pytest.mark.needs_mount_namespace


def ctx() -> ToolContext:
    return ToolContext(function_call_id="c1", tool_confirmation=ToolConfirmation(confirmed=True))


@pytest.fixture
def marker() -> Iterator[Path]:
    """A path outside the workspace that a planted hook or fsmonitor would create when
    the host runs git."""
    where = Path(tempfile.mkdtemp(prefix="sandbox-test-marker-"))
    try:
        yield where / "ran"
    finally:
        shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def home() -> Iterator[Path]:
    where = Path(tempfile.mkdtemp(prefix="sandbox-test-home-"))
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


def host_git(home: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """git as the host runs it: no system or global configuration of this machine."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "h", "GIT_AUTHOR_EMAIL": "h@example.com",
           "GIT_COMMITTER_NAME": "h", "GIT_COMMITTER_EMAIL": "h@example.com"}  # fmt: skip
    return subprocess.run(["git", "-c", "safe.directory=*", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=30, check=False)  # fmt: skip


def make_repo(home: Path, where: Path) -> None:
    where.mkdir(parents=True, exist_ok=True)
    assert host_git(home, where, "init", "-q", ".").returncode == 0
    (where / "README").write_text("hello\n")
    host_git(home, where, "add", "README")
    assert host_git(home, where, "commit", "-qm", "first").returncode == 0


def host_runs(home: Path, repo: Path) -> None:
    """What the host does next in `repo`: status (fsmonitor), commit (hooks), diff."""
    host_git(home, repo, "status")
    (repo / "README").write_text("changed\n")
    host_git(home, repo, "commit", "-qam", "by the host")
    host_git(home, repo, "diff", "HEAD~1")


async def attack(workspace: Path, script: str, *, protect: bool, **policy: Any
                 ) -> dict[str, Any]:  # fmt: skip
    (workspace / ".attack.sh").write_text(script + "\n")
    policy.setdefault("protected_paths", ("@default",) if protect else ())
    policy.setdefault("drop_privileges", False)  # root: no file of the workspace is out of reach
    tool = ExecuteBashTool(workspace=workspace, policy=BashToolPolicy(**policy))
    result: dict[str, Any] = await tool.run_async(args={"command": "bash .attack.sh"},
                                                  tool_context=ctx())  # fmt: skip
    assert "error" not in result or "timed out" in result["error"], result
    return result


FSMONITOR = "printf '[core]\\n\\tfsmonitor = touch {marker}\\n'"
HOOK = "printf '#!/bin/sh\\ntouch {marker}\\n' > hook && chmod +x hook"

# name -> (setup on the host, the attack; {marker} is filled in). Each plants something
# the host's next git status / commit / diff in the workspace runs.
ATTACKS: dict[str, str] = {
    "redirect after cd": "cd .git && " + FSMONITOR + " >> config",
    "cp a hook": HOOK + " && cp hook .git/hooks/pre-commit",
    "mv a hook": HOOK + " && mv hook .git/hooks/pre-commit",
    "python appends": "python3 -c \"open('.git/config', 'a').write('[core]\\\\n\\\\tfsmonitor"
                      " = touch {marker}\\\\n')\"",
    "sed -i": "sed -i 's|^\\[core\\]|[core]\\n\\tfsmonitor = touch {marker}|' .git/config",
    "rm then write": "cp .git/config c && " + FSMONITOR + " >> c && rm -f .git/config; "
                     "cp c .git/config",
    "ln -s over it": "cp .git/config c && " + FSMONITOR + " >> c && ln -sf \"$PWD/c\" "
                     ".git/config",
    "hard link": "ln .git/config c && " + FSMONITOR + " >> c",
    "rename .git then recreate": "mv .git .git2 && cp -a .git2 .git && " + FSMONITOR
                                 + " >> .git/config",
    "hooks dir replaced": HOOK + " && rm -rf .git/hooks; mkdir -p .git/hooks && "
                          "cp hook .git/hooks/pre-commit",
    "commondir to a copy": "mkdir evil && cp -a .git/. evil/ && " + FSMONITOR
                           + " >> evil/config && echo ../evil > .git/commondir",
    "config.worktree": "git config extensions.worktreeConfig true; " + FSMONITOR
                       + " > .git/config.worktree",
}


@needs_git
@needs_mounts
@pytest.mark.parametrize("protect", [True, False], ids=["protected", "control"])
@pytest.mark.parametrize("name", list(ATTACKS))
async def test_an_attack_on_git_control_files_plants_nothing_the_host_runs(
        shared_workspace: Path, home: Path, marker: Path, name: str, protect: bool) -> None:  # fmt: skip
    make_repo(home, shared_workspace)
    config_before = (shared_workspace / ".git" / "config").read_text()
    result = await attack(shared_workspace, ATTACKS[name].format(marker=marker), protect=protect)
    if name == "config.worktree" and not protect:
        # git config itself is refused only by the protection; in the control it ran.
        pass
    host_runs(home, shared_workspace)
    if protect:
        assert not marker.exists(), (name, result)
        assert (shared_workspace / ".git" / "config").read_text() == config_before
        assert ("Read-only file system" in result["stderr"]
                or "Device or resource busy" in result["stderr"]
                or "Invalid cross-device link" in result["stderr"]), result["stderr"]
        assert result["containment"]["protected-paths"].startswith("active: ")
    else:
        assert marker.exists(), (name, result)


@needs_git
@needs_mounts
@pytest.mark.parametrize("protect", [True, False], ids=["protected", "control"])
async def test_hooks_missing_cannot_be_created(shared_workspace: Path, home: Path, marker: Path,
                                               protect: bool) -> None:  # fmt: skip
    make_repo(home, shared_workspace)
    shutil.rmtree(shared_workspace / ".git" / "hooks")
    await attack(shared_workspace, HOOK.format(marker=marker)
                 + " && mkdir -p .git/hooks && cp hook .git/hooks/pre-commit", protect=protect)
    host_runs(home, shared_workspace)
    assert marker.exists() is not protect
    # The placeholder is gone once no run needs it.
    if protect:
        reservations._discard_reservations()
        for _ in range(100):
            if not (shared_workspace / ".git" / "hooks").exists():
                break
            await anyio.sleep(0.02)
        assert not (shared_workspace / ".git" / "hooks").exists()


ABSENT_NAMES = {
    ".envrc": "echo 'touch {marker}' > .envrc",
    ".vscode": "mkdir -p .vscode && echo '{{\"tasks\": []}}' > .vscode/tasks.json",
    ".claude": "mkdir -p .claude && echo '{{\"hooks\": {{}}}}' > .claude/settings.json",
    ".mcp.json": "python3 -c \"open('.mcp.json', 'w').write('{{}}')\"",
    ".gitattributes": "echo '* diff=evil' > .gitattributes",
    ".idea": "ln -s /tmp .idea",
    ".gitconfig": "printf '[core]\\n\\tpager = touch {marker}\\n' > .gitconfig",
}


@needs_mounts
@pytest.mark.parametrize("protect", [True, False], ids=["protected", "control"])
@pytest.mark.parametrize("name", list(ABSENT_NAMES))
async def test_an_absent_protected_name_cannot_be_created(
        shared_workspace: Path, marker: Path, name: str, protect: bool) -> None:  # fmt: skip
    await attack(shared_workspace, ABSENT_NAMES[name].format(marker=marker), protect=protect)
    reservations._discard_reservations()  # the placeholders go with the last holder
    planted = shared_workspace / name
    if protect:
        assert not planted.exists() and not planted.is_symlink(), sorted(
            os.listdir(shared_workspace))  # fmt: skip
    else:
        assert planted.exists() or planted.is_symlink()


@needs_git
@needs_mounts
@pytest.mark.parametrize("protect", [True, False], ids=["protected", "control"])
async def test_a_nested_repository_and_its_parent_directory(
        shared_workspace: Path, home: Path, marker: Path, protect: bool) -> None:  # fmt: skip
    inner = shared_workspace / "sub" / "inner"
    make_repo(home, inner)
    script = ("cd sub/inner/.git && " + FSMONITOR + " >> config; cd \"$OLDPWD\"; "
              "mv sub sub2 && mkdir -p sub && cp -a sub2/inner sub/ && " + FSMONITOR
              + " >> sub/inner/.git/config")
    result = await attack(shared_workspace, script.format(marker=marker), protect=protect)
    host_runs(home, inner)
    assert marker.exists() is not protect, result


@needs_git
@needs_mounts
@pytest.mark.parametrize("protect", [True, False], ids=["protected", "control"])
async def test_a_bare_repository_committed_inside_the_project(
        shared_workspace: Path, home: Path, marker: Path, protect: bool) -> None:  # fmt: skip
    """vendor/lib.git: its config (core.hooksPath) and its hooks run when the host
    pushes to it; each attack alone would be seen."""
    make_repo(home, shared_workspace)
    bare = shared_workspace / "vendor" / "lib.git"
    bare.parent.mkdir()
    assert host_git(home, shared_workspace, "init", "-q", "--bare", str(bare)).returncode == 0
    script = ("mkdir -p evilhooks && printf '#!/bin/sh\\ntouch {marker}\\n' > "
              "evilhooks/pre-receive && chmod +x evilhooks/pre-receive; "
              "printf '[core]\\n\\thooksPath = %s/evilhooks\\n' \"$PWD\" >> "
              "vendor/lib.git/config; " + HOOK + "; cp hook vendor/lib.git/hooks/pre-receive")
    result = await attack(shared_workspace, script.format(marker=marker), protect=protect)
    host_git(home, shared_workspace, "push", "-q", str(bare), "HEAD:refs/heads/main")
    assert marker.exists() is not protect, result


@needs_git
@needs_mounts
@pytest.mark.parametrize("protect", [True, False], ids=["protected", "control"])
async def test_a_git_file_and_the_directory_it_points_to(
        shared_workspace: Path, home: Path, marker: Path, protect: bool) -> None:  # fmt: skip
    make_repo(home, shared_workspace)
    os.rename(shared_workspace / ".git", shared_workspace / "real.git")
    (shared_workspace / ".git").write_text("gitdir: real.git\n")
    script = ("cd real.git && " + FSMONITOR + " >> config; cd ..; "
              "cp -a real.git evil.git && " + FSMONITOR + " >> evil.git/config && "
              "printf 'gitdir: evil.git\\n' > .git")
    result = await attack(shared_workspace, script.format(marker=marker), protect=protect)
    host_runs(home, shared_workspace)
    assert marker.exists() is not protect, result
    if protect:
        assert (shared_workspace / ".git").read_text() == "gitdir: real.git\n"


@needs_git
@needs_mounts
@pytest.mark.parametrize("protect", [True, False], ids=["protected", "control"])
async def test_a_workspace_inside_a_repository_cannot_become_one(
        home: Path, marker: Path, protect: bool) -> None:  # fmt: skip
    outer = Path(tempfile.mkdtemp(prefix="sandbox-test-outer-"))
    try:
        make_repo(home, outer)
        workspace = outer / "sub"
        workspace.mkdir()
        workspace.chmod(0o777)
        script = "git init -q . ; " + FSMONITOR + " >> .git/config"
        await attack(workspace, script.format(marker=marker), protect=protect)
        host_git(home, workspace, "status")
        assert marker.exists() is not protect
    finally:
        shutil.rmtree(outer, ignore_errors=True)


@needs_mounts
async def test_a_symlinked_protected_name_and_its_target(shared_workspace: Path) -> None:
    (shared_workspace / "envrc.real").write_text("export A=1\n")
    (shared_workspace / ".envrc").symlink_to("envrc.real")
    result = await attack(shared_workspace, "echo 'touch x' >> envrc.real; "
                          "ln -sfn other .envrc; echo 'touch x' > .envrc", protect=True)
    assert (shared_workspace / "envrc.real").read_text() == "export A=1\n", result
    assert os.readlink(shared_workspace / ".envrc") == "envrc.real"


@needs_git
@needs_mounts
async def test_a_file_with_another_hard_link_is_refused(shared_workspace: Path, home: Path) -> None:
    make_repo(home, shared_workspace)
    os.link(shared_workspace / ".git" / "config", shared_workspace / "alias")
    tool = ExecuteBashTool(workspace=shared_workspace, policy=BashToolPolicy(drop_privileges=False))
    result = await tool.run_async(args={"command": "true"}, tool_context=ctx())
    assert "hard links" in result["error"] and ".git/config" in result["error"], result


# ------------------------------------------------------------------ reservations


async def _reserved(tool: ExecuteBashTool) -> Any:
    reservations._last_signature = None
    warm = await tool.run_async(args={"command": "true"}, tool_context=ctx())
    assert warm["returncode"] == 0, warm
    signature = reservations._last_signature
    assert signature is not None
    for _ in range(1000):
        await anyio.sleep(0.01)
        kept = reservations._reservations.get(signature, [])
        if kept and all(r.spawner.offered(r.key) for r in kept):
            return kept[0]
    raise AssertionError("the reserved run's zygote was never offered")


@needs_git
@needs_mounts
async def test_a_repository_made_after_the_reservation_is_protected(
        shared_workspace: Path, home: Path, marker: Path) -> None:  # fmt: skip
    """The zygote was set up (its mounts bound) before the repository existed: the run's
    own scan finds it, so that zygote is not used."""
    tool = ExecuteBashTool(workspace=shared_workspace, policy=BashToolPolicy(drop_privileges=False))
    await _reserved(tool)
    make_repo(home, shared_workspace / "late")
    (shared_workspace / ".attack.sh").write_text(
        ("cd late/.git && " + FSMONITOR + " >> config\n").format(marker=marker))
    result = await tool.run_async(args={"command": "bash .attack.sh"}, tool_context=ctx())
    host_runs(home, shared_workspace / "late")
    assert not marker.exists(), result
    assert "Read-only file system" in result["stderr"]


@needs_git
@needs_mounts
async def test_a_config_replaced_on_the_host_after_the_reservation_is_protected(
        shared_workspace: Path, home: Path, marker: Path) -> None:  # fmt: skip
    """`git config` on the host renames a new config over the old one, which detaches
    the zygote's read-only mount of it: the zygote finds that at its request and the
    run is set up afresh."""
    make_repo(home, shared_workspace)
    tool = ExecuteBashTool(workspace=shared_workspace, policy=BashToolPolicy(drop_privileges=False))
    await _reserved(tool)
    assert host_git(home, shared_workspace, "config", "user.name", "x").returncode == 0
    (shared_workspace / ".attack.sh").write_text(
        ("cd .git && " + FSMONITOR + " >> config\n").format(marker=marker))
    result = await tool.run_async(args={"command": "bash .attack.sh"}, tool_context=ctx())
    host_runs(home, shared_workspace)
    assert not marker.exists(), result
    assert "Read-only file system" in result["stderr"]


@needs_mounts
async def test_the_zygote_serves_runs_under_protection(shared_workspace: Path) -> None:
    """Placeholders live while a reserved run needs them: back-to-back runs still take
    their reservations."""
    tool = ExecuteBashTool(workspace=shared_workspace, policy=BashToolPolicy(drop_privileges=False))
    await _reserved(tool)
    taken = reservations._reservations_taken
    result = await tool.run_async(args={"command": "echo x > .envrc"}, tool_context=ctx())
    assert reservations._reservations_taken == taken + 1
    assert result["returncode"] != 0


# ------------------------------------------------------------------ the policy field


def test_default_extends_and_bang_removes() -> None:
    assert protected.resolve_patterns(("@default",)) == protected.DEFAULT_PROTECTED_PATHS
    extended = protected.resolve_patterns(("@default", "Makefile", "!.idea"))
    assert "Makefile" in extended and ".idea" not in extended and ".git/config" in extended
    assert protected.resolve_patterns(("/Makefile",)) == ("/Makefile",)  # replaces
    assert protected.resolve_patterns(()) == ()


@pytest.mark.parametrize("bad", ["../x", "a/../b", "*.sh", "", "@defaults", "!.envrc"])
def test_a_bad_entry_names_the_fix(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="protected_paths"):
        BashToolPolicy(protected_paths=(bad,))


def test_a_string_instead_of_a_list_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="write a list"):
        BashToolPolicy(protected_paths=".envrc")  # type: ignore[arg-type]


def test_policy_files_take_protected_paths(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('allowed_command_prefixes = ["ls"]\n'
                    'protected_paths = ["@default", "/Makefile"]\n')  # fmt: skip
    policy = BashToolPolicy.from_toml(path)
    assert policy.protected_paths == ("@default", "/Makefile")
    path.write_text('allowed_command_prefixes = ["ls"]\nprotected_paths = "x"\n')
    with pytest.raises(PolicyFileError, match="protected_paths"):
        BashToolPolicy.from_toml(path)


# ------------------------------------------------------------------ scale


def test_a_walk_past_its_bound_fails_closed_and_anchored_entries_need_none(
        tmp_path: Path) -> None:  # fmt: skip
    for i in range(30):
        (tmp_path / f"d{i}").mkdir()
    patterns = protected.resolve_patterns(("@default",))
    found = protected.scan(str(tmp_path), patterns, limit=10)
    assert "more than 10 directories" in found.problem
    anchored = protected.scan(str(tmp_path), ("/.envrc", "/.git/config"), limit=10)
    assert not anchored.problem and anchored.placeholders


@needs_mounts
async def test_a_walk_past_its_bound_refuses_the_run(shared_workspace: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setattr(protected, "SCAN_LIMIT", 5)
    for i in range(10):
        (shared_workspace / f"d{i}").mkdir()
    tool = ExecuteBashTool(workspace=shared_workspace, policy=BashToolPolicy())
    result = await tool.run_async(args={"command": "touch ran"}, tool_context=ctx())
    assert "SANDBOX_PROTECTED_SCAN_LIMIT" in result["error"]
    assert not (shared_workspace / "ran").exists()


# ------------------------------------------------------------------ no mount namespace


@needs_git
@pytest.mark.needs_landlock
async def test_without_a_mount_namespace_landlock_refuses_the_writes(
        shared_workspace: Path, home: Path, marker: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv(confinement.UNAVAILABLE_ENV, "private-proc,mount-ns")
    confinement._reset_detection_for_tests()
    monkeypatch.setattr(protected_apply, "_probed", None)
    try:
        make_repo(home, shared_workspace)
        (shared_workspace / "src").mkdir()
        script = ("cd .git && " + FSMONITOR + " >> config; cd ..; " + HOOK
                  + "; cp hook .git/hooks/pre-commit; echo x > .envrc; mv .git .git2; "
                  "echo ok > src/file && cat src/file")
        result = await attack(shared_workspace, script.format(marker=marker), protect=True)
        assert result["containment"]["protected-paths"].startswith("active: Landlock")
        assert result["stdout"] == "ok\n"  # below the root, the workspace stays writable
        host_runs(home, shared_workspace)
        assert not marker.exists(), result
        assert not (shared_workspace / ".envrc").exists()
        assert (shared_workspace / ".git").is_dir()
    finally:
        monkeypatch.delenv(confinement.UNAVAILABLE_ENV)
        confinement._reset_detection_for_tests()
        protected_apply._probed = None


# ------------------------------------------------------------------ an ordinary user

_AGENT = r"""
import asyncio, json, sys
from pathlib import Path
from sandbox import BashToolPolicy, ExecuteBashTool, ToolConfirmation, ToolContext
async def main():
    ws = Path(sys.argv[1])
    tool = ExecuteBashTool(workspace=ws, policy=BashToolPolicy())
    out = {}
    for name, cmd in json.loads(sys.argv[2]).items():
        (ws / ".attack.sh").write_text(cmd + "\n")
        r = await tool.run_async(args={"command": "bash .attack.sh"},
            tool_context=ToolContext(function_call_id="c", tool_confirmation=ToolConfirmation(confirmed=True)))
        out[name] = {"stderr": r.get("stderr", ""), "error": r.get("error"),
                     "protected": r.get("containment", {}).get("protected-paths")}
    print(json.dumps(out))
asyncio.run(main())
"""


@pytest.fixture
def throwaway_user() -> Iterator[pwd.struct_passwd]:
    name = f"holesprot{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "-m", "-s", "/bin/sh", name], check=True, capture_output=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", "-r", name], check=False, capture_output=True)


@needs_root
@needs_git
@pytest.mark.needs_program("setpriv", "useradd")
@pytest.mark.needs_system_python
@pytest.mark.parametrize("unavailable", ["", "mount-ns,private-proc"],
                         ids=["user-namespace", "landlock"])  # fmt: skip
def test_an_unprivileged_agent_protects_them_too(throwaway_user: pwd.struct_passwd,
                                                 home: Path, marker: Path,
                                                 unavailable: str) -> None:  # fmt: skip
    """An agent running as a throwaway ordinary user: its commands get a mount namespace
    in a user namespace; told that none works, Landlock rules around the paths."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    site = [p for p in sys.path if p.endswith("site-packages") and os.access(p, os.R_OK)]
    assert python is not None and site  # needs_system_python
    ws = Path(throwaway_user.pw_dir) / "project"
    make_repo(home, ws)
    marker.parent.chmod(0o777)
    subprocess.run(["chown", "-R", f"{throwaway_user.pw_uid}:{throwaway_user.pw_gid}", str(ws)],
                   check=True)  # fmt: skip
    attacks = {name: ATTACKS[name].format(marker=marker)
               for name in ("redirect after cd", "cp a hook", "rename .git then recreate",
                            "hard link")}  # fmt: skip
    attacks["envrc"] = "echo x > .envrc"
    import json

    repo = REPO
    done = subprocess.run(
        ["setpriv", "--reuid", str(throwaway_user.pw_uid), "--regid",
         str(throwaway_user.pw_gid), "--clear-groups", python, "-c", _AGENT, str(ws),
         json.dumps(attacks)],
        env={"PATH": "/usr/bin:/bin", "HOME": throwaway_user.pw_dir,
             "PYTHONPATH": ":".join([str(repo), *site]),
             confinement.UNAVAILABLE_ENV: unavailable},
        capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    for name, seen in out.items():
        assert seen["error"] is None, (name, seen)
        # With a PID namespace of its own (rootless), the command's own mount namespace;
        # otherwise one made for the protected paths alone.
        mechanism = "active: Landlock" if unavailable else "active: read-only mounts in "
        assert seen["protected"].startswith(mechanism), (name, seen)
    host_runs(home, ws)
    assert not marker.exists(), out
    assert not (ws / ".envrc").exists()


NAMED = {
    # core.hooksPath = .husky (husky's layout): the hooks are workspace files.
    "hooksPath": ("git config core.hooksPath .husky && mkdir .husky && "
                  "printf '#!/bin/sh\\ntrue\\n' > .husky/pre-commit && chmod +x .husky/pre-commit",
                  "printf '#!/bin/sh\\ntouch {marker}\\n' > .husky/pre-commit"),
    # include.path: more configuration, in the workspace.
    "include.path": ("printf '[user]\\n\\tname = t\\n' > team.gitconfig && "
                     "git config include.path ../team.gitconfig",
                     "printf '[core]\\n\\tfsmonitor = touch {marker}\\n' >> team.gitconfig"),
    # A hook that is a link to a tracked script.
    "hook symlink": ("mkdir scripts && printf '#!/bin/sh\\ntrue\\n' > scripts/pre-commit && "
                     "chmod +x scripts/pre-commit && ln -s ../../scripts/pre-commit "
                     ".git/hooks/pre-commit",
                     "printf '#!/bin/sh\\ntouch {marker}\\n' > scripts/pre-commit"),
}


@needs_git
@needs_mounts
@pytest.mark.parametrize("protect", [True, False], ids=["protected", "control"])
@pytest.mark.parametrize("name", list(NAMED))
async def test_what_a_protected_config_or_hook_names_is_protected(
        shared_workspace: Path, home: Path, marker: Path, name: str, protect: bool) -> None:  # fmt: skip
    make_repo(home, shared_workspace)
    setup, script = NAMED[name]
    done = subprocess.run(["bash", "-c", setup], cwd=shared_workspace, capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(home)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = await attack(shared_workspace, script.format(marker=marker), protect=protect)
    host_runs(home, shared_workspace)
    assert marker.exists() is not protect, result


@needs_mounts
async def test_a_directory_past_path_max_refuses_the_run(shared_workspace: Path) -> None:
    """A repository below a path longer than PATH_MAX cannot be named to be bound: the
    run fails closed instead of leaving it writable."""
    fd = os.open(shared_workspace, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(90):  # 90 * 51 characters > 4096
            os.mkdir("d" * 50, dir_fd=fd)
            inner = os.open("d" * 50, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.mkdir(".git", dir_fd=fd)
    finally:
        os.close(fd)
    tool = ExecuteBashTool(workspace=shared_workspace, policy=BashToolPolicy(drop_privileges=False))
    result = await tool.run_async(args={"command": "touch ran"}, tool_context=ctx())
    assert "cannot be examined" in result["error"], result
    assert not (shared_workspace / "ran").exists()
    shutil.rmtree(shared_workspace / ("d" * 50), ignore_errors=True)


ISSUE_CASES = [
    "cd .git && printf '[core]\\n\\tfsmonitor = touch {marker}\\n' >> config",
    "printf '#!/bin/sh\\ntouch {marker}\\n' > hook && cp hook .git/hooks/pre-commit",
]


@needs_git
@needs_mounts
@pytest.mark.parametrize("command", ISSUE_CASES, ids=["cd .git >> config", "cp hook"])
async def test_the_issue_cases_under_python_dev(shared_workspace: Path, home: Path,
                                                marker: Path, command: str) -> None:  # fmt: skip
    """The held-out cases of issue 16 item 3, through the shipped python-dev policy (a
    human approved whatever it asked about): whether the policy lets them through or
    not, nothing lands and the host's git runs nothing. (With protected_paths=() both
    land: checked by hand, and by the control runs above.)"""
    from sandbox.policies import resolve

    make_repo(home, shared_workspace)
    # python-dev drops root privileges to the workspace's owner: make that someone
    # other than root, who may write every file of it.
    subprocess.run(["chown", "-R", "65534:65534", str(shared_workspace)], check=True)
    policy = BashToolPolicy.from_toml(resolve("python-dev"))
    tool = ExecuteBashTool(workspace=shared_workspace, policy=policy)
    result = await tool.run_async(args={"command": command.format(marker=marker)},
                                  tool_context=ctx())  # fmt: skip
    host_runs(home, shared_workspace)
    assert not marker.exists(), result
    if "error" not in result:
        assert "Read-only file system" in result["stderr"], result


@needs_git
@needs_mounts
async def test_a_workspace_that_is_a_bare_repository(shared_workspace: Path, home: Path,
                                                     marker: Path) -> None:  # fmt: skip
    assert host_git(home, shared_workspace, "init", "-q", "--bare", ".").returncode == 0
    before = (shared_workspace / "config").read_text()
    result = await attack(shared_workspace, (FSMONITOR + " >> config; " + HOOK
                                             + "; cp hook hooks/pre-receive").format(marker=marker),
                          protect=True)  # fmt: skip
    assert (shared_workspace / "config").read_text() == before, result
    assert not (shared_workspace / "hooks" / "pre-receive").exists()


# ------------------------------------------------------------------ the scan on the loop
#
# A scan whose walk is cached whole runs on the caller's event loop (scan_if_cached):
# whatever changed in the workspace between two runs must still be found.


@pytest.fixture(autouse=True)
def _no_time_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan on the loop is also bounded by the time the last one took: not what
    these tests are about (and a loaded machine would make them flaky)."""
    monkeypatch.setattr(protected, "_LOOP_SCAN_SECONDS", 60.0)


def _cached(workspace: Path) -> protected.ProtectedPaths | None:
    patterns = protected.resolve_patterns(("@default",))
    return protected.scan_if_cached(str(workspace), patterns)


def _fresh(workspace: Path) -> protected.ProtectedPaths:
    return protected.scan(str(workspace), protected.resolve_patterns(("@default",)))


def test_an_unchanged_workspace_is_scanned_without_a_walk(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    first = _fresh(tmp_path)
    again = _cached(tmp_path)
    assert again is not None and again == first


@needs_git
@pytest.mark.parametrize("change", ["a repository made in a subdirectory",
                                    "a protected name made at the root",
                                    "a protected name made in a subdirectory's repository",
                                    "a directory renamed"])  # fmt: skip
def test_a_directory_changed_between_two_runs_is_walked_again(
        tmp_path: Path, home: Path, change: str) -> None:  # fmt: skip
    make_repo(home, tmp_path / "sub")
    (tmp_path / "other").mkdir()
    before = _fresh(tmp_path)
    assert _cached(tmp_path) == before
    if change == "a repository made in a subdirectory":
        make_repo(home, tmp_path / "other" / "late")
        wanted = str(tmp_path / "other" / "late" / ".git" / "config")
    elif change == "a protected name made at the root":
        (tmp_path / ".envrc").write_text("echo hi\n")
        wanted = str(tmp_path / ".envrc")
    elif change == "a protected name made in a subdirectory's repository":
        (tmp_path / "sub" / ".envrc").write_text("echo hi\n")
        wanted = str(tmp_path / "sub" / ".envrc")
    else:
        os.rename(tmp_path / "sub", tmp_path / "moved")
        wanted = str(tmp_path / "moved" / ".git" / "config")
    assert _cached(tmp_path) is None  # not from the cached walk: a walk, in a thread
    after = _fresh(tmp_path)
    assert wanted in after.read_only, after
    assert _cached(tmp_path) == after  # and cached again from then on


@needs_git
def test_what_a_config_names_is_read_again_on_the_loop(tmp_path: Path, home: Path) -> None:
    """A git configuration changed in place (no directory event) is read again by the
    scan on the loop: what it names (core.hooksPath) is protected at the next run."""
    make_repo(home, tmp_path)
    (tmp_path / "hooks2").mkdir()
    _fresh(tmp_path)
    with open(tmp_path / ".git" / "config", "a") as f:  # in place: no entry made
        f.write("[core]\n\thooksPath = hooks2\n")
    found = _cached(tmp_path)
    assert found is not None and str(tmp_path / "hooks2") in found.read_only, found


@needs_git
def test_a_hard_link_made_outside_the_workspace_is_found_on_the_loop(
        tmp_path: Path, home: Path) -> None:  # fmt: skip
    """A second link to a protected file, made where no walk looks (outside the
    workspace, on the same file system): no directory of the workspace changes, and
    the scan on the loop still refuses the run."""
    workspace = tmp_path / "ws"
    make_repo(home, workspace)
    assert not _fresh(workspace).problem
    os.link(workspace / ".git" / "config", tmp_path / "alias")
    found = _cached(workspace)
    assert found is not None and "hard links" in found.problem, found


def test_a_large_walk_is_not_examined_on_the_loop(tmp_path: Path) -> None:
    for i in range(protected._LOOP_SCAN_DIRECTORIES + 1):
        (tmp_path / f"d{i}").mkdir()
    assert not _fresh(tmp_path).problem
    assert _cached(tmp_path) is None


@needs_mounts
async def test_runs_after_the_first_scan_their_workspace_on_the_loop(
        shared_workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The second run of an unchanged workspace hops to no worker thread for its scan,
    and a protected name made on the host before the third is held all the same."""
    tool = ExecuteBashTool(workspace=shared_workspace, policy=BashToolPolicy(drop_privileges=False))
    # The first run makes the placeholders (entries of the root: walked again at the
    # next run); from then on the reserved runs hold them.
    await _reserved(tool)
    await _reserved(tool)
    hops: list[object] = []
    real = anyio.to_thread.run_sync

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(fn)
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
    assert (await tool.run_async(args={"command": "true"}, tool_context=ctx()))["returncode"] == 0
    assert protected.scan not in hops
    (shared_workspace / "sub" / ".git").mkdir(parents=True)  # a repository, on the host
    (shared_workspace / "sub" / ".git" / "config").write_text("[core]\n")
    (shared_workspace / ".attack.sh").write_text("echo x >> sub/.git/config\n")
    result = await tool.run_async(args={"command": "bash .attack.sh"}, tool_context=ctx())
    assert protected.scan in hops  # the root changed: walked again, in a thread
    assert result["returncode"] != 0 and "Read-only" in result["stderr"], result
    assert (shared_workspace / "sub" / ".git" / "config").read_text() == "[core]\n"


@needs_mounts
@pytest.mark.xfail(strict=True, reason=(
    "the placeholders of a run are removed by the agent after the run (and by the next "
    "run in that workspace); nobody removes them when the agent is SIGKILLed mid-run. "
    "Not a regression of issue 19 (76682a6 leaves them too); the fix belongs in "
    "protected.py / the spawner, being changed by another engineer"))
def test_an_agent_killed_mid_run_leaves_no_placeholder_in_the_workspace(
        tmp_path: Path) -> None:
    """``sandbox run`` SIGKILLed while its command runs: the empty read-only directories
    made for the run in place of missing protected names (``.envrc``, ``.bashrc``,
    ``.vscode``, ``.git/commondir``, ...) stay in the user's workspace."""
    import signal
    import time

    workspace = tmp_path / "ws"
    workspace.mkdir()
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    started = workspace / "started"
    started.touch()
    before = sorted(p.relative_to(workspace) for p in workspace.rglob("*"))
    started.unlink()
    agent = subprocess.Popen(
        [sys.executable, "-m", "sandbox", "run", "--approve", "auto", "--workspace",
         str(workspace), "--", "touch started && sleep 60"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not started.exists():
            assert time.monotonic() < deadline and agent.poll() is None, "no run started"
            time.sleep(0.02)
        assert (workspace / ".envrc").is_dir()  # a placeholder, while the command runs
    finally:
        agent.send_signal(signal.SIGKILL)
        agent.wait(timeout=10)
    time.sleep(3)  # the spawner sees its agent die and ends the run
    after = sorted(p.relative_to(workspace) for p in workspace.rglob("*"))
    assert after == before, sorted(set(after) - set(before))


_AGENT_IN_ITS_OWN_TREE = r"""
import sys, anyio
from sandbox import ExecuteBashTool, ToolConfirmation, ToolContext
import sandbox
assert sandbox.__file__.startswith(sys.argv[1]), sandbox.__file__
tool = ExecuteBashTool(workspace=sys.argv[1])
ctx = ToolContext(function_call_id="c", tool_confirmation=ToolConfirmation(confirmed=True))
result = anyio.run(lambda: tool.run_async(
    args={"command": "echo '# planted' >> sandbox/bash/network/_forwarder_main.py"},
    tool_context=ctx))
print(result.get("returncode"), result.get("stderr", "").strip())
"""


@needs_mounts
def test_a_command_cannot_rewrite_the_package_its_agent_runs(tmp_path: Path) -> None:
    # A workspace that holds the sandbox package the agent runs (an editable install of
    # the repository the agent works on): a rewritten library would run in the spawner,
    # the parse worker and the forwarder the next agent starts, outside the confinement.
    workspace = tmp_path / "repo"
    workspace.mkdir()
    shutil.copytree(REPO / "sandbox", workspace / "sandbox",
                    ignore=shutil.ignore_patterns("__pycache__"))
    target = workspace / "sandbox" / "bash" / "network" / "_forwarder_main.py"
    before = target.read_bytes()
    done = subprocess.run(
        [sys.executable, "-c", _AGENT_IN_ITS_OWN_TREE, str(workspace)],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(workspace)}, cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert target.read_bytes() == before, done.stdout


@needs_mounts
@pytest.mark.parametrize("protect", [True, False], ids=["protected", "control"])
async def test_a_command_cannot_rewrite_the_agents_environment_inside_the_workspace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, protect: bool) -> None:  # fmt: skip
    # The agent's interpreter environment in the workspace (./.venv): a package a command
    # rewrote there would run in the agent at its next import. With protected paths off
    # (the control), the same write goes through: the attack is real.
    import sys

    workspace = tmp_path / "project"
    (workspace / ".venv" / "lib").mkdir(parents=True)
    module = workspace / ".venv" / "lib" / "helper.py"
    module.write_text("VALUE = 1\n")
    monkeypatch.setattr(sys, "prefix", str(workspace / ".venv"))
    result = await attack(workspace, "echo 'import os; os.system(\"id\")' >> .venv/lib/helper.py",
                          protect=protect)
    if protect:
        assert module.read_text() == "VALUE = 1\n", result
        assert result["returncode"] != 0
    else:
        assert "os.system" in module.read_text(), result
