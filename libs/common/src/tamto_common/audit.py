"""Audit records: who did what, when, from where, and how it ended.

Each record is one JSON line appended to the audit file (mode 0600, flushed per
record) and published on the bus as `tamto.events.audit.<category>`:

    {"time": ISO-8601 UTC, "service": "gateway", "category": "denied",
     "actor": "alice", "action": "publish", "target": "stream orders",
     "outcome": "denied", "source": "ipv4:127.0.0.1:50312", "detail": "..."}

Categories: `login` (API key exchanges, granted or refused), `admin` (changes to
identities, keys, roles, bindings, signing keys and streams) and `denied`
(requests refused for a missing permission or an invalid token). Records never
hold a secret: API keys appear by key id only.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

import structlog
from nats.aio.client import Client as NatsClient

from tamto_common.bus import EVENTS
from tamto_common.durable import make_dirs

log = structlog.get_logger(__name__)

LOGIN = "login"
ADMIN = "admin"
DENIED = "denied"


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One audited event."""

    time: str
    service: str
    category: str
    actor: str
    action: str
    target: str
    outcome: str
    source: str
    detail: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


class AuditLog:
    """Writes audit records to a file and the bus; `close()` closes the file."""

    def __init__(self, service: str, path: Path | None, bus: NatsClient | None) -> None:
        self._service = service
        self._bus = bus
        self._file: IO[str] | None = None
        if path is not None:
            # Durably: a service's audit file may be the first thing in its data
            # directory, and a directory made without fsyncing its parent is lost in
            # a power cut with everything the service stores below it later.
            make_dirs(path.parent)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            self._file = os.fdopen(fd, "a", encoding="utf-8")

    async def record(
        self,
        category: str,
        *,
        actor: str,
        action: str,
        target: str,
        outcome: str,
        source: str,
        detail: str = "",
    ) -> AuditRecord:
        """Write one record to the file, then publish it (a bus failure is logged, not raised)."""
        record = AuditRecord(
            time=datetime.now(UTC).isoformat(timespec="milliseconds"),
            service=self._service,
            category=category,
            actor=actor,
            action=action,
            target=target,
            outcome=outcome,
            source=source,
            detail=detail,
        )
        line = record.to_json()
        if self._file is not None:
            self._file.write(line + "\n")
            self._file.flush()
        if self._bus is not None:
            try:
                await self._bus.publish(f"{EVENTS}.audit.{category}", line.encode())
            except Exception as exc:  # the file holds the record; the bus is best effort
                log.warning("audit record not published", error=str(exc), action=action)
        return record

    async def close(self) -> None:
        """Close the audit file."""
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
