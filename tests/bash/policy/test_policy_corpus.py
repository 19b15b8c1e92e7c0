"""The published bash-policy corpus, case by case.

Every non-ambiguous case must get the expected decision. Ambiguous cases (where
blocking is the safe choice and allowing is defensible) never fail: their
decisions are collected and printed by `test_ambiguous_cases_are_reported`
(see them with ``pytest -rP tests/bash/policy/test_policy_corpus.py``).

Set SANDBOX_POLICY_CORPUS to another file of the same shape to run that instead.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from sandbox.bash import BashToolPolicy
from tests.paths import TESTS

CORPUS_PATH = Path(
    os.environ.get(
        "SANDBOX_POLICY_CORPUS", TESTS / "data" / "bash-policy-sample.json"
    )
)
CORPUS: dict[str, Any] = json.loads(CORPUS_PATH.read_text(encoding="utf-8"))
POLICIES = {
    name: BashToolPolicy(
        allowed_command_prefixes=tuple(spec["allowed_command_prefixes"]),
        blocked_operators=tuple(spec["blocked_operators"]),
    )
    for name, spec in CORPUS["policies"].items()
}
CLEAR = [c for c in CORPUS["cases"] if not c.get("ambiguous")]
AMBIGUOUS = [c for c in CORPUS["cases"] if c.get("ambiguous")]


def _verdict(case: dict[str, Any]) -> tuple[str, str]:
    decision = POLICIES[case["policy"]].check(case["cmd"])
    return ("allow" if decision.allowed else "block"), decision.reason


@pytest.mark.parametrize("case", CLEAR, ids=[f"case-{c['id']}-{c['category']}" for c in CLEAR])
def test_unambiguous_case_gets_the_expected_decision(case: dict[str, Any]) -> None:
    verdict, reason = _verdict(case)
    assert verdict == case["expect"], (
        f"case {case['id']} {case['cmd']!r}: expected {case['expect']} ({case['why']}), "
        f"got {verdict}: {reason}"
    )


def test_ambiguous_cases_are_reported() -> None:
    lines = []
    for case in AMBIGUOUS:
        verdict, reason = _verdict(case)
        agrees = "same as corpus" if verdict == case["expect"] else "differs (defensible)"
        lines.append(
            f"case {case['id']:>3} {case['policy']} {verdict:5} [{agrees}] "
            f"{case['cmd']!r:.60} -- {reason:.110}"
        )
    print("\nAmbiguous corpus cases and how this policy decided them:")
    print("\n".join(lines))
    assert len(lines) == len(AMBIGUOUS)


def test_every_blocked_case_names_its_rule() -> None:
    for case in CORPUS["cases"]:
        decision = POLICIES[case["policy"]].check(case["cmd"])
        if not decision.allowed and case["cmd"].strip():
            assert decision.rule in {f"R{i}" for i in range(1, 10)}, (case["id"], decision)
