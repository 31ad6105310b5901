"""Arrow column building for the producer: what a batch's messages become on the wire.

The producer's three parts (see `tamto_sdk.producer`) meet here only through
whole Arrow columns: the accumulator (`tamto_sdk.accumulator`) hands over the
payloads and optional fields it collected, `send_batch`'s input is checked and
converted here column by column, and the sender (`tamto_sdk.sender`) turns the
columns of one batch into Arrow IPC. Nothing here loops over messages in Python
beyond converting a Python list the caller gave.

A batch's columns are always the tuple ``(key, payload, headers, id, event_time)``
(`Columns`), each of the batch schema's type (`tamto_protocol.batch`).
"""

from __future__ import annotations

import array
import itertools
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tamto_protocol.batch import (
    EVENT_TIME_TYPE,
    HEADERS_TYPE,
    ID_TYPE,
    KEY_TYPE,
    PAYLOAD_TYPE,
    int64_array,
    int64_scalar,
    int_values,
    ipc_buffer,
    make_batch,
    sequence_ids,
)
from tamto_sdk.messages import datetime_to_us

__all__ = [
    "MESSAGE_OVERHEAD",
    "Columns",
    "batch_columns",
    "binary_array",
    "concat_columns",
    "encode",
    "int_array",
    "message_columns",
    "row_sizes",
    "with_ids",
]

#: key, payload, headers, id, event_time: the columns of one batch, in this order.
Columns = tuple[pa.Array, ...]

#: Rough per-message overhead of the Arrow encoding (offsets, validity bits, the id),
#: counted into a batch's size besides the payload, key and headers.
MESSAGE_OVERHEAD = 32

#: The headers column as a list of (name, value) structs.
_HEADER_PAIRS = pa.list_(pa.struct([HEADERS_TYPE.key_field, HEADERS_TYPE.item_field]))

_NAMES = ("key", "payload", "headers", "id", "event_time")
_TYPES = (KEY_TYPE, PAYLOAD_TYPE, HEADERS_TYPE, ID_TYPE, EVENT_TIME_TYPE)


def message_columns(
    payloads: list[bytes],
    keys: list[bytes | None] | None = None,
    headers: list[Mapping[str, str] | None] | None = None,
    ids: list[str | None] | None = None,
    event_times: list[int | None] | None = None,
) -> Columns:
    """The columns of messages given one by one (`Producer.send`).

    `keys`, `headers`, `ids` and `event_times` (microseconds since the epoch) are
    given together, one entry per payload, or not at all (every message plain:
    those columns are all null and no Python object is converted).
    """
    n = len(payloads)
    payload_column = binary_array(payloads)
    if keys is None or headers is None or ids is None or event_times is None:
        return (
            pa.nulls(n, KEY_TYPE),
            payload_column,
            pa.nulls(n, HEADERS_TYPE),
            pa.nulls(n, ID_TYPE),
            pa.nulls(n, EVENT_TIME_TYPE),
        )
    return (
        pa.array(keys, KEY_TYPE),
        payload_column,
        pa.array([list(h.items()) if h else None for h in headers], HEADERS_TYPE),
        pa.array(ids, ID_TYPE),
        pa.array(event_times, pa.int64()).cast(EVENT_TIME_TYPE),
    )


def concat_columns(parts: Sequence[Columns]) -> Columns:
    """The columns of consecutive parts of one batch, as one batch's columns."""
    if len(parts) == 1:
        return parts[0]
    return tuple(pa.concat_arrays([part[i] for part in parts]) for i in range(len(_NAMES)))


def batch_columns(messages: Any, keys: Any, headers: Any, ids: Any, event_times: Any) -> Columns:
    """The columns of `Producer.send_batch`'s input, checked.

    `messages` is a table or record batch with a ``payload`` column (and optionally
    the others, by name), or the payloads alone with the other columns as
    arguments. Raises `TypeError` for values of the wrong type and `ValueError`
    for a missing payload column, a length mismatch or a null payload.
    """
    given: list[Any]
    if isinstance(messages, pa.Table | pa.RecordBatch):
        if any(c is not None for c in (keys, headers, ids, event_times)):
            raise TypeError("with a table, give keys, headers, ids and event times as its columns")
        if "payload" not in messages.schema.names:
            raise ValueError("the table has no payload column")
        given = [
            messages.column(name) if name in messages.schema.names else None for name in _NAMES
        ]
    else:
        if isinstance(messages, str | bytes):
            raise TypeError("messages must be a table or a sequence of payloads, not one payload")
        given = [keys, messages, headers, ids, event_times]
        if isinstance(headers, Sequence) and not isinstance(headers, pa.Array):
            given[2] = [list(h.items()) if h else None for h in headers]
        if isinstance(event_times, Sequence) and not isinstance(event_times, pa.Array):
            given[4] = pa.array(
                [_event_time_us(t) for t in event_times],
                pa.int64(),
            )
    n = len(given[1])
    columns: list[pa.Array] = []
    for name, value, type_ in zip(_NAMES, given, _TYPES, strict=True):
        if value is None:
            columns.append(pa.nulls(n, type_))
            continue
        try:
            if isinstance(value, pa.ChunkedArray):
                value = value.combine_chunks()
            if isinstance(value, pa.Array):
                array_ = value
            elif type_ == pa.binary():
                # Inferred, not converted: pyarrow would turn a str into its UTF-8 bytes.
                array_ = pa.array(value)
                if not (pa.types.is_binary(array_.type) or pa.types.is_null(array_.type)):
                    raise TypeError(f"{name} values must be bytes, not {array_.type}")
            else:
                array_ = pa.array(value, type_)
            if array_.type != type_:
                if name == "event_time" and pa.types.is_integer(array_.type):
                    array_ = array_.cast(pa.int64())  # microseconds since the epoch
                array_ = array_.cast(type_)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise TypeError(f"{name} column: {exc}") from None
        if len(array_) != n:
            raise ValueError(f"{name} has {len(array_)} entries for {n} payloads")
        columns.append(array_)
    if columns[1].null_count:
        raise ValueError("payloads must not be null")
    return tuple(columns)


def _event_time_us(value: datetime | None) -> int | None:
    return datetime_to_us(value) if value is not None else None


def row_sizes(columns: Columns) -> pa.Array:
    """Each row's share of a batch's bytes (int64), counted as `Producer.send` counts
    a single message's: payload, key, header names and values, `MESSAGE_OVERHEAD`."""
    # Scalars built from bytes: converting Python ints would make pyarrow import pandas.
    sizes = pc.add(pc.binary_length(columns[1]).cast(pa.int64()), int64_scalar(MESSAGE_OVERHEAD))
    if columns[0].null_count != len(columns[0]):
        key_sizes = pc.fill_null(pc.binary_length(columns[0]).cast(pa.int64()), int64_scalar(0))
        sizes = pc.add(sizes, key_sizes)
    headers = columns[2]
    if headers.null_count != len(headers):
        # Bytes of every header name and value, summed per row without a Python loop.
        pairs = headers.cast(_HEADER_PAIRS)  # list kernels take lists, not maps
        entries = pc.list_flatten(pairs)
        entry_bytes = pc.add(
            pc.binary_length(entries.field(0)).cast(pa.int64()),
            pc.binary_length(entries.field(1)).cast(pa.int64()),
        )
        rows = int_values(pc.list_parent_indices(pairs))
        per_row = np.bincount(rows, weights=int_values(entry_bytes), minlength=len(headers))
        sizes = pc.add(sizes, int64_array(per_row.astype(np.int64)))
    return sizes


def with_ids(ids: pa.Array, producer_id: str, sequence: int) -> pa.Array:
    """`ids` with every null replaced by the next of ``<producer_id>:<sequence>``,
    ``<producer_id>:<sequence + 1>``, ... in row order (built vectorised); the
    caller advances its sequence by ``ids.null_count``."""
    missing = ids.null_count
    if not missing:
        return ids
    generated = sequence_ids(producer_id, sequence, missing)
    if missing == len(ids):
        return generated
    return pc.replace_with_mask(ids, pc.is_null(ids), generated)


def encode(columns: Columns, producer: str | None) -> pa.Buffer:
    """One batch's columns in Arrow IPC form, as a Publish request carries them."""
    key, payload, headers, ids, event_time = columns
    return ipc_buffer(
        make_batch(
            payload, keys=key, headers=headers, ids=ids, event_times=event_time, producer=producer
        )
    )


def binary_array(values: list[bytes]) -> pa.Array:
    """A binary array of `values`, built from one joined buffer.

    Faster than ``pa.array`` for large values, and it converts no Python objects:
    pyarrow imports pandas before its first such conversion (about two seconds),
    which a producer that only sends payloads never pays.
    """
    offsets = array.array("i", [0])
    offsets.extend(itertools.accumulate(map(len, values)))
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(values))]
    return pa.Array.from_buffers(PAYLOAD_TYPE, len(values), buffers)


def int_array(values: array.array[int], type_: pa.DataType) -> pa.Array:
    """An Arrow array over the memory of `values` (whose item size matches `type_`)."""
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])
