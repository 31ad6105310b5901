"""The size limits of one message: the whole message, and each field's own cap.

The message limit (`max_message_bytes` of gateway and router) is on everything a
message carries, not its payload alone: a 1-byte payload with a 40 MB key or
20 MB of headers was stored and served before. A message's size is its payload,
key, headers (every name and value) and id, in bytes; besides that total, the
fields other than the payload have caps of their own (`FIELD_CAPS`), so a key or
an id stays small enough to index and to log. The producer's name (the same on
every message of a batch, set by the SDK) has its cap and is not counted in the
total, so a payload of exactly the limit still fits.

The check costs a few buffer sizes when the batch's columns in all are within
the caps (the usual case); only a batch that might break one is measured row by
row (a few compute kernels over its lengths).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

#: The most bytes each field but the payload may take in one message.
MAX_KEY_BYTES = 64 * 1024
MAX_HEADERS_BYTES = 64 * 1024
MAX_ID_BYTES = 1024
MAX_PRODUCER_BYTES = 1024
FIELD_CAPS = {
    "key": MAX_KEY_BYTES,
    "headers": MAX_HEADERS_BYTES,
    "id": MAX_ID_BYTES,
    "producer": MAX_PRODUCER_BYTES,
}


class MessageTooLarge(ValueError):
    """A message of the batch exceeds the message limit or one of its fields' caps."""


def check_message_sizes(batch: pa.RecordBatch, max_message_bytes: int) -> None:
    """Refuse (`MessageTooLarge`) a batch (`BATCH_SCHEMA`, checked in full before)
    with a message over `max_message_bytes` in all or a field over its cap."""
    if batch.get_total_buffer_size() <= min(MAX_ID_BYTES, max_message_bytes):
        return  # a small batch: all of it fits the smallest cap
    columns = {name: batch.column(name) for name in ("payload", *FIELD_CAPS)}
    bounds = {name: _values_bytes(column) for name, column in columns.items()}
    # A column whose values in all fit a limit cannot break it in any one message.
    for name, cap in FIELD_CAPS.items():
        if bounds[name] > cap:
            sizes = _row_bytes(columns[name])
            _refuse_over(sizes, cap, f"its {name} take {{}} bytes, over the cap of {cap}")
    if sum(bounds.values()) - bounds["producer"] <= max_message_bytes:
        return
    total = _row_bytes(columns["payload"]) + _row_bytes(columns["key"])
    total += _row_bytes(columns["headers"]) + _row_bytes(columns["id"])
    _refuse_over(
        total,
        max_message_bytes,
        "it takes {} bytes (payload, key, headers and id), over the message limit of "
        f"{max_message_bytes}",
    )


def _refuse_over(sizes: npt.NDArray[np.int64], limit: int, problem: str) -> None:
    """Refuse the first message whose entry of `sizes` exceeds `limit`."""
    if len(sizes) and int(sizes.max()) > limit:
        row = int(np.argmax(sizes > limit))
        raise MessageTooLarge(f"message {row} of the batch: " + problem.format(int(sizes[row])))


def _values_bytes(column: pa.Array) -> int:
    """At least the bytes of the column's values in all: its value buffers' sizes
    (a string or binary column's data; a map's keys' and items' data)."""
    if isinstance(column, pa.MapArray):
        return _values_bytes(column.keys) + _values_bytes(column.items)
    buffers = column.buffers()
    data = buffers[2] if len(buffers) > 2 else None
    return 0 if data is None else int(data.size)


def _offsets(column: pa.Array) -> npt.NDArray[np.int64]:
    """The int32 offsets of a binary, string or map array, over its slice."""
    return np.frombuffer(
        column.buffers()[1], "<i4", count=len(column) + 1, offset=column.offset * 4
    ).astype(np.int64)


def _row_bytes(column: pa.Array) -> npt.NDArray[np.int64]:
    """Each row's bytes in `column` (a map's: its names' and values'), 0 for a null."""
    if column.null_count == len(column):
        return np.zeros(len(column), np.int64)
    rows = _offsets(column)
    if isinstance(column, pa.MapArray):
        entries = column.values
        names, values = entries.field(0), entries.field(1)
        cumulative = _offsets(names) + _offsets(values)  # bytes before each entry, plus a base
        sizes = cumulative[rows[1:]] - cumulative[rows[:-1]]
    else:
        sizes = np.diff(rows)
    if column.null_count:
        valid = np.unpackbits(
            np.frombuffer(column.buffers()[0], np.uint8),
            count=column.offset + len(column),
            bitorder="little",
        )[column.offset :]
        sizes = sizes * valid
    return sizes
