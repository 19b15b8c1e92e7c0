"""The rules and the audit anchor of the SQL backends (`SQLRules`, a part of
`SQLApprovalStore`), and the rule row format. Moved out of store/sql.py as they were."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sandbox.approval.models import Rule, canonical_json
from sandbox.approval.store.records import dt

#: The columns of a rule row.
RULE_COLUMNS = (
    "id, tool, kind, words, prefix, args, digest, scope, session_id, created, expires, "
    "created_by, channel, request_id, revoked, revoked_by, uses, last_used"
)


class SQLRules:
    """`StoreProtocol`'s rule and audit-anchor operations in SQL (see `SQLApprovalStore`)."""

    _lock: threading.RLock

    if TYPE_CHECKING:
        def _x(self, sql: str, params: Sequence[Any] = (), *, retry: bool = False) -> Any: ...

        def _xmany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

        def _tx(self) -> contextlib.AbstractContextManager[None]: ...

    # -- rules ---------------------------------------------------------------------------

    def add_rules(self, rules: Sequence[Rule]) -> None:
        with self._tx():
            self._xmany(
                f"INSERT INTO rules({RULE_COLUMNS}) VALUES "
                "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                [rule_row(rule) for rule in rules],
            )

    def active_rules(self, tool: str, session_id: str | None, now: float) -> list[Rule]:
        with self._lock:
            rows = self._x(
                f"SELECT {RULE_COLUMNS} FROM rules WHERE tool=? AND revoked IS NULL "
                "AND expires>? AND (scope='always' OR session_id=?) ORDER BY created",
                (tool, now, session_id or ""),
            ).fetchall()
        return [rule_from_row(r) for r in rows]

    def mark_rules_used(self, rule_ids: Sequence[str], now: float) -> None:
        with self._tx():
            for rule_id in rule_ids:
                self._x(
                    "UPDATE rules SET uses=uses+1, last_used=? WHERE id=?", (now, rule_id))

    def get_rule(self, rule_id: str) -> Rule | None:
        with self._lock:
            row = self._x(
                f"SELECT {RULE_COLUMNS} FROM rules WHERE id=?", (rule_id,)).fetchone()
        return None if row is None else rule_from_row(row)

    def list_rules(self, *, include_inactive: bool, tool: str | None,
                   now: float) -> list[Rule]:
        query = f"SELECT {RULE_COLUMNS} FROM rules"
        where: list[str] = []
        params: list[Any] = []
        if not include_inactive:
            where.append("revoked IS NULL AND expires>?")
            params.append(now)
        if tool is not None:
            where.append("tool=?")
            params.append(tool)
        if where:
            query += " WHERE " + " AND ".join(where)
        with self._lock:
            rows = self._x(query + " ORDER BY created, id", params).fetchall()
        return [rule_from_row(r) for r in rows]

    def revoke_rule(self, rule_id: str, by: str | None, now: float) -> bool:
        """Revoke a rule (once); False when no rule has this id."""
        with self._tx():
            cur = self._x(
                "UPDATE rules SET revoked=?, revoked_by=? WHERE id=? AND revoked IS NULL",
                (now, by, rule_id),
            )
            return cur.rowcount == 1 or self._x(
                "SELECT 1 FROM rules WHERE id=?", (rule_id,)).fetchone() is not None

    # -- the audit anchor ------------------------------------------------------------------

    def audit_head(self, log: str) -> tuple[int, str] | None:
        with self._lock:
            row = self._x(
                "SELECT value FROM meta WHERE key=?", (f"audit:{log}",)).fetchone()
        if row is None:
            return None
        count, last_hash = str(row[0]).split(":", 1)
        return int(count), last_hash

    def anchor_audit(self, log: str, count: int, last_hash: str) -> None:
        with self._lock:
            self._x(
                "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE "
                "SET value=excluded.value", (f"audit:{log}", f"{count}:{last_hash}"))


def rule_row(rule: Rule) -> tuple[Any, ...]:
    def ts(value: datetime | None) -> float | None:
        return None if value is None else value.timestamp()

    return (
        rule.id, rule.tool, rule.kind,
        None if rule.words is None else json.dumps(list(rule.words), ensure_ascii=False),
        int(rule.prefix), None if rule.args is None else canonical_json(rule.args),
        rule.digest, rule.scope, rule.session_id, ts(rule.created_at), ts(rule.expires_at),
        rule.created_by, rule.channel, rule.request_id, ts(rule.revoked_at), rule.revoked_by,
        rule.uses, ts(rule.last_used_at),
    )


def utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def rule_from_row(row: tuple[Any, ...]) -> Rule:
    return Rule(
        id=row[0], tool=row[1], kind=row[2],
        words=None if row[3] is None else tuple(json.loads(row[3])), prefix=bool(row[4]),
        args=None if row[5] is None else json.loads(row[5]), digest=row[6], scope=row[7],
        session_id=row[8], created_at=utc(row[9]), expires_at=utc(row[10]),
        created_by=row[11], channel=row[12], request_id=row[13], revoked_at=dt(row[14]),
        revoked_by=row[15], uses=row[16], last_used_at=dt(row[17]),
    )
