"""Issue 8's R7 examples, each refused with its rule named: under the shipped
policies (program specs) and under Python policies that have no specs (the R7
table, and the shipped spec behind a prefix that pins an option)."""

from __future__ import annotations

import pytest

from sandbox.bash import BashToolPolicy
from sandbox.policies import resolve

RO = BashToolPolicy.from_toml(resolve("readonly"))
GIT = BashToolPolicy.from_toml(resolve("git-readonly"))
DEV = BashToolPolicy.from_toml(resolve("python-dev"))
PY_AWK = BashToolPolicy(allowed_command_prefixes=("awk",))
PY_SED = BashToolPolicy(allowed_command_prefixes=("sed",))
PY_GIT = BashToolPolicy(allowed_command_prefixes=("git",))
PY_MODES = BashToolPolicy(allowed_command_prefixes=("git remote -v", "git branch --list"))

REFUSED = [
    (DEV, r"sed -nes,^,touch\ /tmp/p,e", "s///e"),
    (DEV, r"sed -n --ex=1e\ touch\ /tmp/p", "'e' command"),
    (DEV, "sed -n --ex=p a", "--expression"),
    (GIT, 'git config --get --no-get core.fsmonitor "cmd"', "--no-get"),
    (GIT, "git remote -v add x URL", "'add'"),
    (GIT, "git branch --list --no-list -D x", "--no-list"),
    (RO, "sort -o FILE", "-o"),
    (RO, "sort --output=FILE", "--output"),
    (RO, "uniq IN OUT", "OUT"),
    (RO, "tree -o FILE", "-o"),
    (RO, "date -s 2020-01-01", "-s"),
    # -l pipes the output through pr, a program the policy never saw.
    (RO, "diff -l a b", "-l"),
    (RO, "diff --pag a b", "--pag"),
    # Without specs: the R7 table reads bundles, abbreviations and negations too.
    (PY_AWK, "awk -W exec /dev/stdin <<< 'BEGIN{system(\"id\")}'", "awk -W"),
    (PY_SED, r"sed -nes,^,touch\ /tmp/p,e", "s///e"),
    (PY_SED, r"sed -n --ex=1e\ touch\ /tmp/p", "'e' command"),
    (PY_SED, r"sed -n --ex 1e\ id", "'e' command"),
    (PY_SED, "sed -ne 1e\\ id", "'e' command"),
    (PY_GIT, 'git config --get --no-get core.fsmonitor "cmd"', "git config"),
    # A prefix that pins an option states a mode the shipped spec keeps.
    (PY_MODES, "git remote -v add x URL", "'add'"),
    (PY_MODES, "git branch --list --no-list -D x", "--no-list"),
]


@pytest.mark.parametrize(("policy", "command", "named"), REFUSED, ids=[c for _, c, _ in REFUSED])
def test_refused_with_the_rule_named(policy: BashToolPolicy, command: str, named: str) -> None:
    decision = policy.check(command)
    assert not decision.allowed, command
    assert decision.rule == "R7", decision.reason
    assert named in decision.reason, decision.reason


ALLOWED = [
    (PY_SED, "sed -n 1p a"), (PY_SED, "sed -ne p -e 1d a"), (PY_SED, "sed -l 5 p a"),
    (PY_SED, "sed --expr=p a"), (PY_GIT, "git config --get user.name"),
    (PY_GIT, "git remote -v add x URL"),  # "git" allows every subcommand by design
    (PY_MODES, "git remote -v"), (PY_MODES, "git branch --list"),
]


@pytest.mark.parametrize(("policy", "command"), ALLOWED, ids=[c for _, c in ALLOWED])
def test_still_allowed(policy: BashToolPolicy, command: str) -> None:
    decision = policy.check(command)
    assert decision.allowed, decision.reason
