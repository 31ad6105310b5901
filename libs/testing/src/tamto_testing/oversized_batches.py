"""Batches that cost more than their size: compressed IPC buffers that unpack to far
more than they take, and messages whose key, headers or id are huge beside a tiny
payload, or whose event time no reader can represent. For the edge's limits'
tests (docs/validation.md, Sizes and values).
"""

from __future__ import annotations

import struct

import pyarrow as pa

from tamto_protocol.batch import (
    BATCH_SCHEMA,
    PAYLOAD_TYPE,
    BatchColumns,
    encode_batch,
    make_batch,
)

#: The rows of `bomb` and the bytes of zeros each one's payload holds.
BOMB_ROWS = 80
BOMB_PAYLOAD_BYTES = 900_000


def compressed(batch: pa.RecordBatch, codec: str = "zstd") -> bytes:
    """`batch` as an IPC stream whose buffers are compressed with `codec`."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=codec)
    with pa.ipc.new_stream(sink, BATCH_SCHEMA, options=options) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def bomb(rows: int = BOMB_ROWS, payload_bytes: int = BOMB_PAYLOAD_BYTES) -> bytes:
    """`rows` payloads of zeros, compressed: ~72 MB unpacked (each payload under the
    1 MiB message limit) in a few kilobytes."""
    zeros = b"\0" * payload_bytes
    return compressed(make_batch(pa.array([zeros] * rows, PAYLOAD_TYPE)))


#: The payload bytes of `forged_unpacked_size`'s batch (a length no other field has).
_FORGED_ROWS, _FORGED_PAYLOAD = 10, 1237


def forged_unpacked_size(claimed: int = 1 << 40) -> bytes:
    """A small compressed batch whose payload buffer records `claimed` bytes unpacked
    (the 8-byte prefix of a compressed buffer): Arrow would allocate that much first."""
    data = compressed(make_batch(pa.array([b"x" * _FORGED_PAYLOAD] * _FORGED_ROWS, PAYLOAD_TYPE)))
    true_size = struct.pack("<q", _FORGED_ROWS * _FORGED_PAYLOAD)
    assert data.count(true_size) == 1, "the payload buffer's prefix is not unique"
    return data.replace(true_size, struct.pack("<q", claimed))


def one_message(
    *,
    payload: bytes = b"p",
    key: bytes | None = None,
    headers: dict[str, str] | None = None,
    id: str | None = None,
    event_time_us: int | None = None,
) -> bytes:
    """One message with the given fields, as the SDK would encode it."""
    return encode_batch(
        BatchColumns(
            payloads=[payload],
            keys=[key],
            headers=[headers],
            ids=[id],
            event_times_us=[event_time_us],
        )
    )
