"""Dead letters: messages a subscription gives up on, moved to the dead-letter stream.

A message goes there after `max_deliveries` deliveries, or when it is still
unacked more than `max_lag` offsets behind the newest delivered one, so one
poison message never stalls a cursor. The dead-letter stream is an ordinary
persistent stream (created with one partition when first needed); each message
keeps its payload, key and headers and gains headers naming where it came from
and why. Its id is derived from the original position, so dead-lettering the
same message twice (a crash between publishing and acking) stores it once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pyarrow as pa

from tamto_protocol.batch import (
    PAYLOAD_TYPE,
    BatchFormatError,
    decode_batch,
    decode_valid_batch,
    encode_record_batch,
    make_batch,
)

HEADER_PREFIX = "tamto.dlq."


@dataclass(frozen=True)
class Policy:
    """What a stream's definition says about delivery limits."""

    ack_timeout_s: float = 30.0
    max_deliveries: int = 0  # 0: never dead-letter for redeliveries
    max_lag: int = 0  # 0: never dead-letter for lag
    dead_letter_stream: str = ""


@dataclass(frozen=True)
class Origin:
    stream: str
    partition: int
    subscription: str


Publish = Callable[[str, bytes, int], Awaitable[None]]
"""Appends (stream, arrow_ipc, count) to the dead-letter stream durably."""


def dead_letter_batch(
    arrow_ipc: bytes,
    first_offset: int,
    origin: Origin,
    delivery_count: int,
    reason: str,
) -> bytes:
    """The messages of `arrow_ipc` (offsets from `first_offset`) as dead letters.

    A batch whose buffers fail the full check (one written past the gateway's and
    storage's validation, docs/validation.md) cannot be read safely: its dead
    letters have empty payloads and say why in their reason, rather than carry
    whatever its offsets point at.
    """
    try:
        batch = decode_valid_batch(arrow_ipc)
    except BatchFormatError as exc:
        batch = make_batch(pa.array([b""] * decode_batch(arrow_ipc).num_rows, PAYLOAD_TYPE))
        reason = f"{reason}; undecodable: {exc}"
    rows = batch.num_rows
    old_headers = batch.column("headers").to_pylist()
    headers = []
    ids = []
    for row in range(rows):
        offset = first_offset + row
        entries = [(k, v) for k, v in (old_headers[row] or []) if not k.startswith(HEADER_PREFIX)]
        entries += [
            (f"{HEADER_PREFIX}stream", origin.stream),
            (f"{HEADER_PREFIX}partition", str(origin.partition)),
            (f"{HEADER_PREFIX}offset", str(offset)),
            (f"{HEADER_PREFIX}subscription", origin.subscription),
            (f"{HEADER_PREFIX}delivery_count", str(delivery_count)),
            (f"{HEADER_PREFIX}reason", reason),
        ]
        headers.append(entries)
        ids.append(f"dlq:{origin.stream}:{origin.partition}:{offset}:{origin.subscription}")
    columns = {name: batch.column(name) for name in batch.schema.names}
    columns["headers"] = pa.array(headers, type=batch.schema.field("headers").type)
    columns["id"] = pa.array(ids, type=pa.string())
    rebuilt = pa.RecordBatch.from_arrays(
        [columns[name] for name in batch.schema.names], schema=batch.schema
    )
    return encode_record_batch(rebuilt)
