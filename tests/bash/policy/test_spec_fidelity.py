"""The shipped program specs read a command line the way the real program does.

A spec says which options take a value. If it is wrong, the word after the option
escapes the check: ``git log --pretty --ext-diff`` passed as ``--pretty`` with the
value ``--ext-diff``, but git reads ``--pretty`` alone (its value is optional) and
``--ext-diff`` as an option of its own; ``tree -Lo 2 M`` passed as ``-L`` with the
value ``o``, but tree takes ``-L``'s value from the next word and keeps reading the
bundle, so ``o`` is ``-o M`` (write the tree to M).

So every spec in ``specs.toml`` (and every one a shipped policy file adds or
replaces) is checked against the real program (Debian's
coreutils, grep, findutils, file, git, tree, ripgrep, sed, mawk; scripts/test.sh
installs them), in a scratch git repository, with a sentinel word that no program
knows as an option, ``--definitely-not-an-option-xyz``:

- a flag (``options``): ``prog FLAG SENTINEL`` must complain about the sentinel as an
  unknown option (the flag did not take it as its value);
- a value option (``value_options``): ``prog OPT SENTINEL`` must not (the option took
  it), while ``prog OPT SAMPLE SENTINEL`` must (the control: the program parses the
  word after the value as an option and the complaint is recognized);
  ``--opt=SAMPLE SENTINEL`` and, for a short option, ``-oSAMPLE SENTINEL`` must too;
- an optional value (``optional_value_options``): ``prog OPT SENTINEL`` must complain
  (the value is only taken after ``=`` or glued);
- bundles (getopt): ``-X<flag letter> SENTINEL`` must complain (the value option took
  the rest of the word) and ``-<flag>X SAMPLE SENTINEL`` too, unless the spec says
  ``bundles = false`` (the checker then refuses bundles, tested below); two flags
  bundled, ``-fg SENTINEL``, must complain;
- ``prog -- SENTINEL`` must not complain (``--`` ends the options), except for find,
  which reads predicates after ``--`` (its spec does too).

A spec that disagrees fails here, naming the option and what the program did. The
checker is held to the same reading: a command line in which the program reads the
unknown sentinel as an option must be refused by `check_spec`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandbox import BashToolPolicy
from sandbox.bash.policy.specs import ProgramSpec, builtin_specs, check_spec
from sandbox.bash.syntax.parse import Word
from sandbox.policies import names, resolve

SENTINEL = "--definitely-not-an-option-xyz"
FIND_SENTINEL = "-definitely-not-a-predicate-xyz"

# Bash builtins (the shell's own option parser): none takes a value option.
BUILTINS = ("echo", "printf", "true", "false", "pwd")

# The ways the programs say "this word is an option I do not know", each naming it.
_UNKNOWN = re.compile(
    r"unrecognized option|unknown option|Invalid argument `|wasn't expected|"
    r"unexpected argument|unknown predicate|not an option|unrecognized argument|"
    r"invalid option|unknown switch"
)

# Operands put after the sentinel, where a program needs one to get that far.
OPERANDS: dict[str, list[str]] = {
    "tr": ["a", "b"], "git blame": ["f.txt"], "git rev-list": ["HEAD"], "awk": ["BEGIN{}"],
}
# Debian's awk is mawk; gawk replaces it where installed (its alternative ranks higher):
# the awk spec must fit both.
AWKS = ("mawk", "gawk")
# Programs whose options follow their operands (find's expression; but find's -H, -L
# and -P come before the starting points).
LEADING: dict[str, list[str]] = {"find": ["."]}
GLOBAL_FIRST = {("find", "-H"), ("find", "-L"), ("find", "-P")}
# An option that needs an operand before the sentinel is reached.
NEEDS: dict[tuple[str, str], list[str]] = {
    ("git log", "--follow"): ["f.txt"], ("git diff", "--merge-base"): ["HEAD"],
}
# Where an unknown word is not a complaint, the probe's next word is an option the
# program knows, with an effect the test sees: rg refuses a value that starts with '-'
# ("requires a value"), unless it takes any value (-e), and lists files on --files; git rev-parse prints the options it
# does not know, and the work tree on --show-toplevel.
NEXT_WORD = {"rg": "--files", "git rev-parse": "--show-toplevel"}
# ... and --version where --files conflicts with the option (rg then refuses both).
RG_VERSION = {"-q", "--quiet", "--json", "--type-list", "-e", "--regexp", "-f", "--file"}
# Not probed, with the reason.
EXEMPT = {
    ("tail", "-NUM"): "tail -NUM is the obsolete form, valid only alone",
    ("git stash list", "--"): "git stash list hands what follows '--' to git log as "
    "options: its spec must allow no operand, so nothing may follow '--'",
}
# Parsers that print their usage without naming the unknown option.
_USAGE_ONLY = ("git diff", "git rev-list", "git stash show")


@dataclass(frozen=True)
class Probe:
    spec: str
    argv: tuple[str, ...]
    expect_seen: bool | None  # the program must complain about the sentinel as an option
    what: str
    same_as: tuple[str, ...] = ()  # ... or read it as it reads this split form
    word: str = SENTINEL  # the probe's next word
    option: str = ""


def _sentinel(spec: ProgramSpec, option: str) -> str:
    if spec.name == "rg" and option in RG_VERSION:
        return "--version"
    return NEXT_WORD.get(spec.name, FIND_SENTINEL if spec.single_dash_long else SENTINEL)


def _short(option: str, spec: ProgramSpec) -> bool:
    return (not spec.single_dash_long and len(option) == 2 and option[0] == "-"
            and option[1] != "-")


# The spec set each checked spec belongs to (the checker dispatches subcommands in it).
_SPEC_SETS: dict[int, Mapping[str, ProgramSpec]] = {}


def _checked_specs() -> list[ProgramSpec]:
    """specs.toml, and the specs a shipped policy file adds or replaces."""
    builtin = builtin_specs()
    specs = list(builtin.values())
    for spec in specs:
        _SPEC_SETS[id(spec)] = builtin
    for policy in names():
        own = BashToolPolicy.from_toml(resolve(policy)).program_specs
        for name, spec in own.items():
            if builtin.get(name) != spec and spec not in specs:
                specs.append(spec)
                _SPEC_SETS[id(spec)] = own
    out = []
    for spec in specs:
        if spec.name in BUILTINS:
            assert not any(k != "none" for k in spec.options.values()), spec.name
            continue
        if spec.any_options or spec.ask_unlisted:
            # ask_unlisted (pytest): anything beyond the spec asks a human, so a misread
            # can only ask more; and argparse refuses an option word as a value
            continue
        out.append(spec)
    return out


def _probes(spec: ProgramSpec) -> Iterator[Probe]:
    base = [*spec.name.split(), *LEADING.get(spec.name, [])]
    tail = OPERANDS.get(spec.name, [])

    def argv(words: list[str], option: str) -> tuple[str, ...]:
        s = _sentinel(spec, option)
        if (spec.name, option) in GLOBAL_FIRST:
            return (spec.name, *words, s)
        return (*base, *words, s, *NEEDS.get((spec.name, option), []), *tail)

    def probe(words: list[str], seen: bool, what: str) -> Probe:
        return Probe(spec.name, argv(words, words[0]), seen, what,
                     word=_sentinel(spec, words[0]), option=words[0])

    def same(words: list[str], split: list[str], what: str) -> Probe:
        option = split[-1] if split[-1].startswith("-") else split[-2]
        return Probe(spec.name, argv(words, option), None, what, argv(split, option),
                     word=_sentinel(spec, option), option=option)

    flags = [o for o, k in spec.options.items() if k == "none" and _short(o, spec)
             and o[1].isalpha()]
    for option, kind in spec.options.items():
        if option in ("(", ")", "!") or (spec.name, option) in EXEMPT:
            continue
        if option == "-NUM":
            option = "-2"
        sample = spec.examples.get(option, "1")
        if kind == "none":
            yield probe([option], True, f"flag {option} takes no value")
            continue
        if kind == "optional":
            yield probe([option], True,
                        f"{option}'s value is optional: it must not take the next word")
            continue
        yield probe([option], False, f"{option} takes the next word as its value")
        yield probe([option, sample], True, f"{option} {sample} (control)")
        if option.startswith("--"):
            yield same([f"{option}={sample}"], [option, sample], f"{option}={sample}")
        elif _short(option, spec) and spec.bundles:
            yield same([option + sample], [option, sample], f"{option}{sample} (glued value)")
            for flag in flags[:2]:
                yield same([flag + option[1], sample], [flag, option, sample],
                           f"{flag}{option[1]} {sample}: a value option ends a bundle")
    # '--' ends the options (getopt), except for find, whose predicates follow it
    before = ["HEAD"] if spec.name == "git rev-list" else []
    if (spec.name, "--") in EXEMPT:
        assert spec.operands == 0, EXEMPT[(spec.name, "--")]
    else:
        yield Probe(spec.name, (*spec.name.split(), *before, "--", _sentinel(spec, "--"),
                                *(tail if not before else [])),
                    spec.single_dash_long, "'--' ends the options" if not spec.single_dash_long
                    else "find reads predicates after '--'", word=_sentinel(spec, "--"),
                    option="--")
    if spec.bundles:
        for flag in flags[1:]:
            yield same([flags[0] + flag[1]], [flags[0], flag], f"{flags[0]}{flag[1]}: flags")


def _env(home: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LC_ALL": "C",
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_PAGER": "cat", "PAGER": "cat",
            "GIT_OPTIONAL_LOCKS": "0"}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fidelity")
    (root / "home").mkdir()
    ws = root / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("a x\nb y\n")
    env = _env(root / "home")
    who = ["-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], [*who, "commit", "-qm", "one"]):
        subprocess.run(["git", *args], cwd=ws, env=env, check=True)
    (ws / "f.txt").write_text("changed\n")  # a stash, for git stash list and show
    subprocess.run(["git", *who, "stash", "-q"], cwd=ws, env=env, check=True)
    return ws


def _seen(probe: Probe, out: str, err: str, cwd: Path) -> bool:
    """Did the program read the probe's next word as an option?"""
    if probe.word == "--version":
        return "ripgrep" in out
    if probe.spec == "rg":
        return "f.txt" in out  # --files listed the work tree
    if probe.spec == "git rev-parse":
        return str(cwd) in out.splitlines()
    s = FIND_SENTINEL if probe.spec == "find" else SENTINEL
    bare = s.lstrip("-")
    if probe.spec in _USAGE_ONLY and err.startswith(f"usage: {probe.spec} "):
        return True
    if probe.argv[0] == "gawk" and err.startswith("Usage: gawk"):
        return True  # gawk prints its usage for an option it does not know
    if any(bare in line and _UNKNOWN.search(line) for line in err.splitlines()):
        return True
    # '--format' without '=' is no option of git log's: it refuses the command, and
    # the next word is not taken either
    named = probe.option.lstrip("-")
    return probe.what.startswith(f"{probe.option}'s value is optional") and any(
        re.search(rf"[`' ]-*{re.escape(named)}'?$", line) and _UNKNOWN.search(line)
        for line in err.splitlines())


def _run_one(probe: Probe, argv: tuple[str, ...], cwd: Path) -> tuple[bool, str]:
    proc = subprocess.run(argv, cwd=cwd, env=_env(cwd.parent / "home"),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          errors="replace", timeout=20, check=False)
    said = (proc.stderr or proc.stdout).strip().splitlines()
    return _seen(probe, proc.stdout, proc.stderr, cwd), said[0][:120] if said else ""


def _run(probe: Probe, cwd: Path) -> tuple[Probe, bool, bool, str]:
    seen, said = _run_one(probe, probe.argv, cwd)
    if probe.expect_seen is not None:
        return probe, seen, probe.expect_seen, said
    split, split_said = _run_one(probe, probe.same_as, cwd)
    return probe, seen, split, f"{said} / split: {split_said}"


def test_every_program_with_a_spec_is_installed() -> None:
    missing = sorted({s.name.split()[0] for s in _checked_specs()
                      if shutil.which(s.name.split()[0]) is None}
                     | {a for a in AWKS if shutil.which(a) is None})
    assert not missing, f"install {missing} (scripts/test.sh does) to check their specs"


def test_every_spec_reads_options_as_its_program_does(repo: Path) -> None:
    specs = _checked_specs()
    probes = [p for spec in specs for p in _probes(spec)]
    probes = [dataclasses.replace(p, argv=(awk, *p.argv[1:]),
                                  same_as=(awk, *p.same_as[1:]) if p.same_as else ())
              if p.spec == "awk" else p for p in probes for awk in AWKS
              if p.spec == "awk" or awk == AWKS[0]]
    assert len({p.spec for p in probes}) >= len({s.name for s in specs}) - 3  # option-less
    assert len(probes) > 1000
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(lambda p: _run(p, repo), probes))
    wrong = [f"{p.spec}: {p.what}: `{' '.join(p.argv)}` -> sentinel {'' if seen else 'not '}"
             f"read as an option ({out!r})"
             for p, seen, expected, out in results if seen != expected]
    assert not wrong, f"{len(wrong)} mismatches:\n" + "\n".join(wrong)
    # And the checker itself: where the program reads the unknown sentinel as an
    # option, the checker must refuse the command line (it reads the sentinel as the
    # unlisted option it is, or refuses the bundle); allowing it would mean it took
    # the sentinel for a value or an operand.
    by_name = {spec.name: spec for spec in specs}
    slipped = []
    for p, seen, _, _ in results:
        if seen and p.word in (SENTINEL, FIND_SENTINEL):
            spec_set = _SPEC_SETS[id(by_name[p.spec])]
            argv = (p.spec.split()[0], *p.argv[1:])  # mawk and gawk are checked as awk
            words = [Word(a, a, a, True) for a in argv]
            if check_spec(words, spec_set) is None:
                slipped.append(f"{p.spec}: {p.what}: `{' '.join(p.argv)}`")
    assert not slipped, "the checker allows what the program reads as an option:\n" + \
        "\n".join(slipped)


@pytest.mark.parametrize("command", [
    "tree -Lo 2 M", "tree -Po x M", "tree -Io x M", "tree -dL 2", "tree -L2 .", "tree -ad .",
    "git log -n1", "git log -pn 1", "git log -pi",
])
def test_a_spec_without_bundles_refuses_them(command: str) -> None:
    policy = "git-readonly" if command.startswith("git") else "readonly"
    decision = BashToolPolicy.from_toml(resolve(policy)).check(command)
    assert not decision.allowed
    assert decision.rule == "R7", decision.reason
    assert "one short option per word" in decision.reason, decision.reason


def test_tree_really_reads_bundles_its_own_way(tmp_path: Path) -> None:
    """Why tree's spec says ``bundles = false``: ``-Lo 2 M`` writes M."""
    subprocess.run(["tree", "-Lo", "2", "M"], cwd=tmp_path, capture_output=True, check=False,
                   timeout=20)
    assert (tmp_path / "M").exists()
    policy = BashToolPolicy.from_toml(resolve("readonly"))
    assert policy.check("tree -L 2 -a .").allowed
    assert not policy.check("tree -ad .").allowed  # one option per word


@pytest.mark.parametrize(("policy", "command"), [
    ("git-readonly", "git show --pretty --ext-diff"),
    ("git-readonly", "git log --pretty --ext-diff"),
    ("git-readonly", "git log --abbrev --ext-diff"),
    ("git-readonly", "git show --abbrev --ext-diff"),
    ("git-readonly", "git diff --abbrev --ext-diff"),
    ("git-readonly", "git diff --relative --ext-diff"),
    ("git-readonly", "git blame -M --ext-diff f.txt"),
    ("git-readonly", "git blame -C --ext-diff f.txt"),
    ("git-readonly", "git blame --abbrev --ext-diff f.txt"),
    ("git-readonly", "git describe --abbrev --ext-diff"),
    ("git-readonly", "git reflog show --pretty --ext-diff"),
])
def test_the_adversary_s_value_options_no_longer_hide_the_next_word(
        policy: str, command: str) -> None:
    decision = BashToolPolicy.from_toml(resolve(policy)).check(command)
    assert not decision.allowed, command
    assert decision.rule == "R7" and "--ext-diff" in decision.reason, decision.reason
