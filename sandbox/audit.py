"""The audit trail: one structlog event per step of every gated call.

Events carry the call id, the tool and the argument digest; arguments pass through a
redaction hook first. With a path configured, events are also appended as JSON lines,
each carrying the SHA-256 of the previous line (``prev``) and of itself (``hash``), so
`verify_audit` finds a record that was changed, inserted or deleted. Several processes
may append to one file: writes hold an exclusive `flock`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import threading
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import structlog

#: ``redact(tool, args) -> args``: what may be written about a call's arguments.
Redactor = Callable[[str, dict[str, Any]], dict[str, Any]]

_SECRET_KEY = re.compile(
    r"pass(word|wd|phrase)?|secret|token|api[_-]?key|authori[sz]ation|cookie|credential|"
    r"private[_-]?key|session[_-]?key",
    re.IGNORECASE,
)
GENESIS = "0" * 64


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

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._last_hash: str | None = None
        self._last_size = -1
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
                record["prev"] = self._last_hash
                body = json.dumps(record, sort_keys=True, ensure_ascii=False, default=str)
                digest = hashlib.sha256(body.encode()).hexdigest()
                line = body[:-1] + f',"hash":"{digest}"}}\n'
                os.write(fd, line.encode())
                self._last_hash = digest
                self._last_size = size + len(line.encode())
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


def _add_timestamp(
    _: Any, __: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    event_dict["ts"] = datetime.now(timezone.utc).isoformat()
    return event_dict


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
    ) -> None:
        self.path = Path(path) if path is not None else None
        self.redact = redact
        self._file = (
            structlog.wrap_logger(
                _ChainedJsonLines(self.path),
                processors=[_add_timestamp],
                wrapper_class=structlog.BoundLogger,
            )
            if self.path is not None
            else None
        )
        self._structlog = structlog_logger

    @property
    def enabled(self) -> bool:
        return self._file is not None or self._structlog is not None or structlog.is_configured()

    def emit(self, event: str, *, tool: str, call_id: str, digest: str | None = None,
             args: dict[str, Any] | None = None, **fields: Any) -> None:
        if not self.enabled:
            return
        record: dict[str, Any] = {"call_id": call_id, "tool": tool, "digest": digest, **fields}
        if args is not None:
            record["args"] = self.redact(tool, args) if self.redact else args
        logger = self._structlog
        if logger is None and structlog.is_configured():
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


def verify_audit(path: str | os.PathLike[str]) -> AuditVerification:
    """Recompute the hash chain; report the first record that was changed, inserted or
    deleted (a deletion shows as a ``prev`` that does not match the line before)."""
    prev = GENESIS
    count = 0
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
                claimed = record.pop("hash")
            except (ValueError, KeyError):
                return AuditVerification(False, count, "not a chained audit record", number)
            if record.get("prev") != prev:
                return AuditVerification(
                    False, count,
                    "chain broken: a record before this one was deleted, inserted or changed",
                    number,
                )
            body = json.dumps(record, sort_keys=True, ensure_ascii=False, default=str)
            if hashlib.sha256(body.encode()).hexdigest() != claimed:
                return AuditVerification(False, count, "record was modified", number)
            prev = claimed
            count += 1
    return AuditVerification(True, count)
