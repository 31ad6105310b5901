"""The Arrow record batch that carries messages across every hop (DESIGN.md §5).

A producer encodes a batch once as an Arrow IPC stream; gateway, router and
storage pass those bytes along untouched. Offsets and publish time are assigned
per batch by the router and travel beside the bytes (`StoredBatch`), so nothing
downstream re-encodes message by message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

SCHEMA_VERSION = 1

#: Columns a producer sends. The stored/segment schema adds `offset` and `publish_time`.
BATCH_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("payload", pa.binary(), nullable=False),
        pa.field("headers", pa.map_(pa.string(), pa.string())),
        pa.field("id", pa.string()),
        pa.field("event_time", pa.timestamp("us", tz="UTC")),
        pa.field("producer", pa.string()),
    ],
    metadata={b"tamto.schema_version": str(SCHEMA_VERSION).encode()},
)


class BatchFormatError(ValueError):
    """The bytes are not a valid Tamto message batch."""


@dataclass(frozen=True, slots=True)
class BatchColumns:
    """Column-wise input for `encode_batch`; every sequence has one entry per message."""

    payloads: Sequence[bytes]
    keys: Sequence[bytes | None]
    headers: Sequence[Mapping[str, str] | None]
    ids: Sequence[str | None]
    event_times_us: Sequence[int | None]
    producer: str | None = None


def encode_batch(columns: BatchColumns) -> bytes:
    """Encode messages, given column by column, as one Arrow IPC stream."""
    n = len(columns.payloads)
    headers = [list(h.items()) if h else None for h in columns.headers]
    arrays = [
        pa.array(columns.keys, type=pa.binary()),
        pa.array(columns.payloads, type=pa.binary()),
        pa.array(headers, type=pa.map_(pa.string(), pa.string())),
        pa.array(columns.ids, type=pa.string()),
        pa.array(columns.event_times_us, type=pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array([columns.producer] * n, type=pa.string()),
    ]
    return encode_record_batch(pa.RecordBatch.from_arrays(arrays, schema=BATCH_SCHEMA))


def decode_batch(data: bytes) -> pa.RecordBatch:
    """Decode one IPC stream into a single record batch, checking the schema.

    Zero-copy: the returned arrays point into `data`.
    """
    try:
        table = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as exc:
        raise BatchFormatError(f"not an Arrow IPC stream: {exc}") from exc
    if not table.schema.equals(BATCH_SCHEMA, check_metadata=False):
        raise BatchFormatError(
            f"batch schema does not match schema version {SCHEMA_VERSION}: got {table.schema}"
        )
    batches = table.combine_chunks().to_batches()
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=BATCH_SCHEMA)
    return batches[0]


def validate_batch(data: bytes, count: int, max_message_bytes: int) -> pa.RecordBatch:
    """Decode and check a producer's batch: schema, declared count, payload sizes."""
    batch = decode_batch(data)
    if batch.num_rows != count:
        raise BatchFormatError(f"batch declares {count} messages but holds {batch.num_rows}")
    if batch.num_rows == 0:
        raise BatchFormatError("batch is empty")
    if batch.column("payload").null_count:
        raise BatchFormatError("payload must not be null")
    if max_message_bytes > 0:
        sizes = pc.binary_length(batch.column("payload"))
        largest = pc.max(sizes).as_py()
        if largest is not None and largest > max_message_bytes:
            raise BatchFormatError(
                f"a message payload of {largest} bytes exceeds the limit of {max_message_bytes}"
            )
    return batch


def encode_record_batch(batch: pa.RecordBatch) -> bytes:
    """One record batch as an IPC stream (the form every hop carries)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def slice_batch(data: bytes, start: int, length: int) -> bytes:
    """Re-encode rows [start, start+length) of an IPC batch as a new IPC stream.

    Used only where a consumer must not see part of a stored batch (already
    acked messages, a start offset inside a batch); whole batches travel as-is.
    """
    return encode_record_batch(decode_batch(data).slice(start, length))
