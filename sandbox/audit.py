"""The audit trail: one structlog event per step of every gated call.

Events carry the call id, the tool and the argument digest; arguments pass through a
redaction hook first. With a path configured, events are also appended as JSON lines,
each carrying the SHA-256 of the previous line (``prev``) and of itself (``hash``), so
`verify_audit` finds a record that was changed, inserted or deleted. Several processes
may append to one file: writes hold an exclusive `flock`.

A chain alone cannot show that its last records were cut off: what is left is still a
valid chain. With an ``anchor`` (an approval store), every write also records the
chain's head — its record count and last hash — in the store, under the log's real
path, and ``verify_audit(path, anchor=store)`` compares the file with it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import sys
import threading
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from sandbox.text import escape_surrogates

#: ``redact(tool, args) -> args``: what may be written about a call's arguments.
Redactor = Callable[[str, dict[str, Any]], dict[str, Any]]

_SECRET_KEY = re.compile(
    r"pass(word|wd|phrase)?|secret|token|api[_-]?key|authori[sz]ation|cookie|credential|"
    r"private[_-]?key|session[_-]?key",
    re.IGNORECASE,
)
GENESIS = "0" * 64


class AuditAnchor(Protocol):
    """Where a log's head is kept: what an approval store offers (`StoreProtocol`)."""

    def audit_head(self, log: str) -> tuple[int, str] | None: ...

    def anchor_audit(self, log: str, count: int, last_hash: str) -> None: ...


def anchor_key(path: str | os.PathLike[str]) -> str:
    """The name a log's head is anchored under: its real, absolute path."""
    return os.path.realpath(path)


def redact_secrets(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """Default redaction: values under keys that look like secrets become ``[REDACTED]``."""

    def walk(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {
                k: "[REDACTED]" if isinstance(k, str) and _SECRET_KEY.search(k) else walk(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(args)  # type: ignore[no-any-return]


class _ChainedJsonLines:
    """structlog's final 'logger': appends hash-chained JSON lines to one file."""

    def __init__(self, path: Path, anchor: AuditAnchor | None = None) -> None:
        self.path = path
        self.anchor = anchor
        self._key = anchor_key(path)
        self._lock = threading.Lock()
        self._last_hash: str | None = None
        self._last_size = -1
        self._count = 0
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.close(fd)

    def msg(self, **record: Any) -> None:
        with self._lock:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                size = os.fstat(fd).st_size
                if size != self._last_size or self._last_hash is None:
                    # Another process wrote since our last record: chain onto its line.
                    self._last_hash = _tail_hash(fd, size)
                    if self.anchor is not None:
                        self._count = _count_lines(fd, size)
                record["prev"] = self._last_hash
                body = escape_surrogates(
                    json.dumps(record, sort_keys=True, ensure_ascii=False, default=str))
                digest = hashlib.sha256(body.encode()).hexdigest()
                line = body[:-1] + f',"hash":"{digest}"}}\n'
                os.write(fd, line.encode())
                self._last_hash = digest
                self._last_size = size + len(line.encode())
                self._count += 1
                if self.anchor is not None:
                    # Still under the flock: anchors advance in the order lines were written.
                    self.anchor.anchor_audit(self._key, self._count, digest)
            finally:
                os.close(fd)  # closing releases the flock

    info = warning = error = msg


def _tail_hash(fd: int, size: int) -> str:
    if size == 0:
        return GENESIS
    chunk = min(size, 1 << 16)
    data = os.pread(fd, chunk, size - chunk)
    lines = data.rstrip(b"\n").split(b"\n")
    try:
        return str(json.loads(lines[-1])["hash"])
    except (ValueError, KeyError):
        return hashlib.sha256(lines[-1]).hexdigest()


def _count_lines(fd: int, size: int) -> int:
    count, offset = 0, 0
    while offset < size:
        chunk = os.pread(fd, min(1 << 20, size - offset), offset)
        if not chunk:
            break
        count += chunk.count(b"\n")
        offset += len(chunk)
    return count


def _add_timestamp(
    _: Any, __: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    event_dict["ts"] = datetime.now(UTC).isoformat()
    return event_dict


def _structlog_configured() -> bool:
    """Whether the application configured structlog. One that never imported it has
    not: structlog (~30 ms with asyncio and logging) is then not imported at all."""
    structlog = sys.modules.get("structlog")
    return structlog is not None and bool(structlog.is_configured())


class AuditLog:
    """Emits the gate's events: to structlog (when the application configured it) and,
    with ``path``, to a hash-chained JSON-lines file.

    ``redact`` sees every argument dict before it is logged; the default blanks values
    under secret-looking keys.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        redact: Redactor | None = redact_secrets,
        structlog_logger: Any = None,
        anchor: AuditAnchor | None = None,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self.redact = redact
        if self.path is not None:
            import structlog
        self._file = (
            structlog.wrap_logger(
                _ChainedJsonLines(self.path, anchor),
                processors=[_add_timestamp],
                wrapper_class=structlog.BoundLogger,
            )
            if self.path is not None
            else None
        )
        self._structlog = structlog_logger

    @property
    def enabled(self) -> bool:
        return self._file is not None or self._structlog is not None or _structlog_configured()

    def emit(self, event: str, *, tool: str, call_id: str, digest: str | None = None,
             args: dict[str, Any] | None = None, **fields: Any) -> None:
        if not self.enabled:
            return
        record: dict[str, Any] = {"call_id": call_id, "tool": tool, "digest": digest, **fields}
        if args is not None:
            record["args"] = self.redact(tool, args) if self.redact else args
        logger = self._structlog
        if logger is None and _structlog_configured():
            import structlog

            logger = structlog.get_logger("sandbox.audit")
        if logger is not None:
            logger.info(event, **record)
        if self._file is not None:
            self._file.info(event, **record)


@dataclass(frozen=True)
class AuditVerification:
    ok: bool
    records: int
    problem: str | None = None
    line: int | None = None
    anchored: bool = False
    """Whether the file was also checked against the head anchored in a store."""
    note: str | None = None


UNANCHORED_NOTE = ("checked without a store: records deleted from the end of the log "
                   "cannot be detected (pass the store the log is anchored in)")


def verify_audit(path: str | os.PathLike[str], *,
                 anchor: AuditAnchor | None = None) -> AuditVerification:
    """Recompute the hash chain; report the first record that was changed, inserted or
    deleted (a deletion shows as a ``prev`` that does not match the line before).

    With ``anchor`` (the store the log was written with), also compare the file with
    the head anchored there: fewer records, or another record where the anchored last
    one was, means the log was cut off or rewritten.
    """
    result = _verify_chain(path)
    if anchor is None:
        return AuditVerification(result.ok, result.records, result.problem, result.line,
                                 note=UNANCHORED_NOTE)
    if not result.ok:
        return AuditVerification(result.ok, result.records, result.problem, result.line,
                                 anchored=True)
    head = anchor.audit_head(anchor_key(path))
    if head is None:
        return AuditVerification(
            False, result.records, "the store has no anchor for this log: it was not "
            "written with this store, or the store was replaced", None, anchored=True)
    count, last_hash = head
    if result.records < count:
        return AuditVerification(
            False, result.records,
            f"truncated: the store's anchor says {count} records ending in "
            f"{last_hash[:12]}…, the file has {result.records}", result.records + 1,
            anchored=True)
    if result.hashes[count - 1] != last_hash:
        return AuditVerification(
            False, result.records, f"record {count} is not the one anchored in the store "
            f"({last_hash[:12]}…): the log was rewritten", count, anchored=True)
    return AuditVerification(True, result.records, anchored=True)


@dataclass(frozen=True)
class _Chain:
    ok: bool
    records: int
    problem: str | None
    line: int | None
    hashes: list[str]


def _verify_chain(path: str | os.PathLike[str]) -> _Chain:
    prev = GENESIS
    count = 0
    hashes: list[str] = []
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
                claimed = record.pop("hash")
            except (ValueError, KeyError):
                return _Chain(False, count, "not a chained audit record", number, hashes)
            if record.get("prev") != prev:
                return _Chain(
                    False, count,
                    "chain broken: a record before this one was deleted, inserted or changed",
                    number, hashes,
                )
            body = escape_surrogates(
                json.dumps(record, sort_keys=True, ensure_ascii=False, default=str))
            if hashlib.sha256(body.encode()).hexdigest() != claimed:
                return _Chain(False, count, "record was modified", number, hashes)
            prev = claimed
            hashes.append(claimed)
            count += 1
    return _Chain(True, count, None, None, hashes)
