"""The decision rules (store/decisions.py) as pure functions. The contract tests
(test_store_contract.py) check that every backend applies them alike."""

from __future__ import annotations

import json

import pytest

from sandbox.approval.store import decisions
from sandbox.errors import (
    ConfigurationError,
    ConfirmationStateError,
    ConfirmationTimedOutError,
)


def test_a_request_takes_a_decision_while_pending_up_to_its_expiry_inclusive() -> None:
    assert decisions.decidable("pending", None, 1e12)
    assert decisions.decidable("pending", 100.0, 100.0)
    assert not decisions.decidable("pending", 100.0, 100.000001)
    for status in ("approved", "denied", "edited", "timed_out", "error", "cancelled"):
        assert not decisions.decidable(status, None, 0.0)


@pytest.mark.parametrize(("status", "state", "granted"), [
    ("approved", "approved", True), ("edited", "editing", False),
    ("denied", "denied", False), ("timed_out", "timed_out", False),
    ("error", "error", False), ("cancelled", "cancelled", False),
])
def test_the_call_state_a_status_gives(status: str, state: str, granted: bool) -> None:
    assert decisions.call_state(status) == (state, granted)


def test_a_late_decision_on_an_answered_request_names_who_answered() -> None:
    with pytest.raises(ConfirmationStateError, match=r"\(denied, by alice\)"):
        decisions.late_decision("cf_1", current="denied", expires=None, now=0.0,
                                status="approved", decided_by="alice", channel="web")
    with pytest.raises(ConfirmationStateError, match=r"\(approved, by web\)"):
        decisions.late_decision("cf_1", current="approved", expires=None, now=0.0,
                                status="approved", decided_by=None, channel="web")
    with pytest.raises(ConfirmationStateError, match="another decider"):
        decisions.late_decision("cf_1", current="approved", expires=None, now=0.0,
                                status="denied", decided_by=None, channel=None)


def test_a_late_decision_on_a_timed_out_request_says_when_it_expired() -> None:
    with pytest.raises(ConfirmationTimedOutError,
                       match=r"cf_1 timed out \(it expired at 1970-01-01T00:01:40\+00:00\)"):
        decisions.late_decision("cf_1", current="timed_out", expires=100.0, now=200.0,
                                status="approved", decided_by=None, channel=None)


def test_a_pending_expired_request_refuses_a_human_and_records_a_failure() -> None:
    for status in sorted(decisions.LATE_REFUSED):
        assert decisions.late_decision("cf_1", current="pending", expires=1.0, now=2.0,
                                       status=status, decided_by=None, channel=None)
    for status in ("timed_out", "error", "cancelled"):
        assert not decisions.late_decision("cf_1", current="pending", expires=1.0,
                                           now=2.0, status=status, decided_by=None,
                                           channel=None)


def test_an_answer_is_taken_once_and_only_in_time() -> None:
    assert decisions.answerable("cf_1", current="pending", expires=None, now=5.0)
    assert not decisions.answerable("cf_1", current="pending", expires=4.0, now=5.0)
    with pytest.raises(ConfirmationStateError, match=r"already answered \(denied\)"):
        decisions.answerable("cf_1", current="denied", expires=None, now=0.0)
    with pytest.raises(ConfirmationTimedOutError):
        decisions.answerable("cf_1", current="timed_out", expires=None, now=0.0)


def test_an_answer_is_checked_and_recorded_as_canonical_json() -> None:
    text = decisions.answer_text({"confirmed": False, "hint": "no"}, decided_by="bob",
                                 channel="cli")
    assert json.loads(text) == {"outcome": "deny", "reason": "no", "decided_by": "bob",
                                "channel": "cli", "scope": "once"}
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"),
                              ensure_ascii=False)
    assert decisions.answer_view(text, None, "ignored")["channel"] == "cli"
    assert decisions.answer_view('{"outcome": "approve"}', "ann", None) == {
        "outcome": "approve", "decided_by": "ann"}
    with pytest.raises(ConfigurationError):
        decisions.answer_text("not json", decided_by=None, channel=None)


def test_a_human_decision_must_agree_with_the_answer_recorded_first() -> None:
    decisions.check_waiting_answer("cf_1", "deny", '{"outcome": "deny"}', "web")
    with pytest.raises(ConfirmationStateError, match=r"\(deny, by web\).*first answer wins"):
        decisions.check_waiting_answer("cf_1", "approve", '{"outcome": "deny"}', "web")


def test_a_timed_out_call_records_why_it_did_not_run() -> None:
    result = decisions.timed_out_result("cf_9")
    assert result["status"] == "timed_out" and "cf_9" in result["error"]
    assert "not run" in result["error"]
