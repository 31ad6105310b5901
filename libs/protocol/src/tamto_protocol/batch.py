"""The Arrow record batch that carries messages across every hop (DESIGN.md §5).

A producer encodes a batch once as an Arrow IPC stream; gateway, router and
storage pass those bytes along untouched. Offsets and publish time are assigned
per batch by the router and travel beside the bytes (`StoredBatch`), so nothing
downstream re-encodes message by message.
"""

from __future__ import annotations

import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tamto_protocol.ipc_bounds import (
    UnpackedSizeError,
    check_unpacked_size,
    too_large,
    unpacked_body_bytes,
)
from tamto_protocol.message_size import MessageTooLarge, check_message_sizes

if TYPE_CHECKING:
    pass

SCHEMA_VERSION = 1

#: Column types, for building batches column by column.
KEY_TYPE = pa.binary()
PAYLOAD_TYPE = pa.binary()
HEADERS_TYPE = pa.map_(pa.string(), pa.string())
ID_TYPE = pa.string()
EVENT_TIME_TYPE = pa.timestamp("us", tz="UTC")
PRODUCER_TYPE = pa.string()

#: Columns a producer sends. The stored/segment schema adds `offset` and `publish_time`.
BATCH_SCHEMA = pa.schema(
    [
        pa.field("key", KEY_TYPE),
        pa.field("payload", PAYLOAD_TYPE, nullable=False),
        pa.field("headers", HEADERS_TYPE),
        pa.field("id", ID_TYPE),
        pa.field("event_time", EVENT_TIME_TYPE),
        pa.field("producer", PRODUCER_TYPE),
    ],
    metadata={b"tamto.schema_version": str(SCHEMA_VERSION).encode()},
)


class BatchFormatError(ValueError):
    """The bytes are not a valid Tamto message batch."""


#: The most a batch's buffers may take once unpacked (compressed IPC buffers): what an
#: uncompressed batch may take at most, the gRPC message limit of every hop.
MAX_UNPACKED_BYTES = 64 * 1024 * 1024


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


def make_batch(
    payloads: pa.Array,
    *,
    keys: pa.Array | None = None,
    headers: pa.Array | None = None,
    ids: pa.Array | None = None,
    event_times: pa.Array | None = None,
    producer: str | None = None,
) -> pa.RecordBatch:
    """A batch from whole columns (a missing column is all null), without a per-row loop.

    Every given array must already have its column's type (`PAYLOAD_TYPE`, ...).
    """
    n = len(payloads)
    return pa.RecordBatch.from_arrays(
        [
            keys if keys is not None else pa.nulls(n, KEY_TYPE),
            payloads,
            headers if headers is not None else pa.nulls(n, HEADERS_TYPE),
            ids if ids is not None else pa.nulls(n, ID_TYPE),
            event_times if event_times is not None else pa.nulls(n, EVENT_TIME_TYPE),
            pa.nulls(n, PRODUCER_TYPE)
            if producer is None
            else pa.repeat(string_scalar(producer), n),
        ],
        schema=BATCH_SCHEMA,
    )


def sequence_ids(prefix: str, first: int, count: int) -> pa.Array:
    """The ids ``<prefix>:<first>`` .. ``<prefix>:<first + count - 1>``, built vectorised.

    This is the form of the ids an idempotent producer gives its messages; the
    router's dedup window recognises batches of them without a per-id loop.
    """
    numbers = _counting(count)
    if first:
        numbers = pc.add_checked(numbers, int64_scalar(first))
    return prefixed_numbers(prefix, numbers)


_COUNTING: list[pa.Array] = []


def _counting(count: int) -> pa.Array:
    """0, 1, ..., count - 1 as int64, sliced from one array kept for the process."""
    if not _COUNTING or len(_COUNTING[0]) < count:
        size = max(count, 1024, 2 * len(_COUNTING[0]) if _COUNTING else 0)
        _COUNTING[:] = [int64_array(array.array("q", range(size)))]
    return _COUNTING[0].slice(0, count)


def int64_scalar(value: int) -> pa.Scalar:
    """`value` as an Arrow int64 scalar, built from its bytes (see `string_scalar`)."""
    return int64_array(array.array("q", [value]))[0]


def int64_array(values: Any) -> pa.Array:
    """Contiguous native int64 values (an ``array.array("q")``, a numpy int64 array)
    as an Arrow array over the same memory. ``pa.array`` of a numpy array would
    import pandas first, as for Python objects (see `string_scalar`)."""
    data = memoryview(values)
    if data.itemsize != 8 or not data.c_contiguous:
        raise ValueError("int64_array needs contiguous 8-byte integers")
    return pa.Array.from_buffers(pa.int64(), data.nbytes // 8, [None, pa.py_buffer(values)])


_NUMPY_INTS = {pa.int32(): "<i4", pa.int64(): "<i8"}


def int_values(values: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.int64]:
    """The numbers of an int32/int64 array without nulls as a numpy int64 array (a
    view of the Arrow buffer when it is one int64 chunk). ``to_numpy`` would import pandas first
    (see `string_scalar`)."""
    array = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    if array.null_count:
        raise ValueError("int_values needs an array without nulls")
    dtype = np.dtype(_NUMPY_INTS[array.type])
    data = array.buffers()[1]
    if data is None:
        return np.empty(0, np.int64)
    found = np.frombuffer(data, dtype, count=len(array), offset=array.offset * dtype.itemsize)
    return found.astype(np.int64, copy=False)


def prefixed_numbers(prefix: str, numbers: pa.Array) -> pa.Array:
    """``<prefix>:<n>`` for every integer `n` of `numbers`, `n` in canonical decimal."""
    return pc.binary_join_element_wise(
        string_scalar(f"{prefix}:"), pc.cast(numbers, ID_TYPE), string_scalar("")
    )


def string_scalar(text: str) -> pa.Scalar:
    """`text` as an Arrow string scalar, built from its bytes.

    ``pa.scalar(text)`` would do, but converting any Python object makes pyarrow
    import pandas first (about two seconds, once per process); servers that never
    otherwise convert Python objects would pay that on their first batch.
    """
    data = text.encode()
    offsets = array.array("i", [0, len(data)])
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.string(), 1, buffers)[0]


#: The schema message of a `BATCH_SCHEMA` stream, its metadata (`_known_schema_batches`),
#: and the end-of-stream marker a stream writer closes with (`ipc_buffer`).
_SCHEMA_MESSAGE = BATCH_SCHEMA.serialize().to_pybytes()
_SCHEMA_METADATA = pa.ipc.read_message(_SCHEMA_MESSAGE).metadata
_END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"


def decode_batch(data: bytes | memoryview) -> pa.RecordBatch:
    """Decode one IPC stream into a single record batch, checking the schema only.

    Zero-copy: the returned arrays point into `data` (unless the stream holds
    several record batches, which are then combined). The buffers are trusted:
    use this only on bytes a Tamto service validated (`validate_batch`) before
    storing them; anything from outside goes through `decode_valid_batch`.
    """
    return _combined(_read_batches(data))


def decode_column(data: bytes | memoryview, name: str) -> pa.Array:
    """Column `name` of `decode_batch(data)`, trusted the same way, read without parsing
    the stream's schema when it is `BATCH_SCHEMA` byte for byte (as Tamto's own batches
    are): reading the ids of thousands of small stored batches (a partition's dedup
    window rebuilt on a takeover) took 4x as long through `decode_batch`."""
    batches = _known_schema_batches(data)
    if batches is not None and len(batches) == 1:
        return batches[0].column(name)
    return decode_batch(data).column(name)


def decode_valid_batch(
    data: bytes | memoryview, max_unpacked_bytes: int = MAX_UNPACKED_BYTES
) -> pa.RecordBatch:
    """`decode_batch`, with every column of every record batch checked in full
    (`check_buffers`) before any value is read or the batches are combined, and
    every value within the range its readers can represent (`check_values`).

    Compressed buffers are unpacked only once their recorded unpacked sizes are
    known to total at most `max_unpacked_bytes` (`tamto_protocol.ipc_bounds`).
    """
    try:
        batches = _read_batches(data, max_unpacked_bytes)
    except UnpackedSizeError as exc:
        raise BatchFormatError(str(exc)) from None
    for batch in batches:
        check_buffers(batch)
        check_values(batch)
    return _combined(batches)


#: The event times a reader can represent: Python's `datetime` range, in µs since the
#: epoch (0001-01-01 to 9999-12-31T23:59:59.999999 UTC).
MIN_EVENT_TIME_US = -62_135_596_800_000_000
MAX_EVENT_TIME_US = 253_402_300_799_999_999


def check_values(batch: pa.RecordBatch) -> None:
    """Refuse values that pass Arrow's checks but break readers: an `event_time`
    outside `MIN_EVENT_TIME_US`..`MAX_EVENT_TIME_US` (converting it to a `datetime`,
    as the SDK does, raised OverflowError)."""
    column = batch.column("event_time")
    if column.null_count == len(column):
        return
    if column.null_count:  # a null's slot may hold anything
        low, high = (v.as_py() for v in pc.min_max(column.cast(pa.int64())).values())
    else:
        times = np.frombuffer(
            column.buffers()[1], "<i8", count=len(column), offset=column.offset * 8
        )
        low, high = int(times.min()), int(times.max())
    if low < MIN_EVENT_TIME_US or high > MAX_EVENT_TIME_US:
        raise BatchFormatError(
            f"column 'event_time': a value lies outside {MIN_EVENT_TIME_US}.."
            f"{MAX_EVENT_TIME_US} µs since the epoch (years 1 to 9999)"
        )


def _known_schema_batches(
    data: bytes | memoryview, max_unpacked_bytes: int | None = None
) -> list[pa.RecordBatch] | None:
    """The record batches of a stream whose schema message is `BATCH_SCHEMA`'s byte
    for byte (as every Tamto encoder writes it), read without parsing the schema;
    None for any other stream, or one Arrow cannot read (`_read_batches` then says
    what is wrong). Opening a stream reader and comparing schemas cost about two
    thirds of checking a one-message batch (in a profile of request/reply)."""
    if data[: len(_SCHEMA_MESSAGE)] != _SCHEMA_MESSAGE:
        return None
    source = pa.BufferReader(pa.py_buffer(data))
    source.seek(len(_SCHEMA_MESSAGE))
    batches, unpacked = [], 0
    try:
        while source.tell() < source.size():
            message = pa.ipc.read_message(source)
            if max_unpacked_bytes is not None:
                unpacked += unpacked_body_bytes(message)
                if unpacked > max_unpacked_bytes:
                    raise UnpackedSizeError(too_large(max_unpacked_bytes))
            batches.append(pa.ipc.read_record_batch(message, BATCH_SCHEMA))
    except EOFError:
        pass  # the end-of-stream marker
    except (pa.ArrowException, OSError):
        return None
    return batches


def _read_batches(
    data: bytes | memoryview, max_unpacked_bytes: int | None = None
) -> list[pa.RecordBatch]:
    """The record batches of `data`; with `max_unpacked_bytes`, `UnpackedSizeError`
    before anything is unpacked past it (`tamto_protocol.ipc_bounds`)."""
    known = _known_schema_batches(data, max_unpacked_bytes)
    if known is not None:
        return known
    if max_unpacked_bytes is not None:
        check_unpacked_size(data, max_unpacked_bytes)
    try:
        reader = pa.ipc.open_stream(pa.py_buffer(data))
        if not reader.schema.equals(BATCH_SCHEMA, check_metadata=False):
            raise BatchFormatError(_schema_mismatch(reader.schema))
        return list(reader)
    # Any Arrow error (ArrowNotImplementedError for an unknown codec or type too), and
    # a column name that is not UTF-8, which pyarrow raises when the name is read.
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise BatchFormatError(f"not an Arrow IPC stream: {_quoted(str(exc))}") from exc


def _combined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=BATCH_SCHEMA)
    combined = pa.Table.from_batches(batches).combine_chunks().to_batches()
    return combined[0] if combined else pa.RecordBatch.from_pylist([], schema=BATCH_SCHEMA)


#: The most characters of a producer's column names or type an error quotes: a
#: schema is the producer's to make, and quoted whole it made an error message of
#: 955,143 characters.
_MAX_QUOTED = 200


def _schema_mismatch(schema: pa.Schema) -> str:
    """Which column of `schema` differs from `BATCH_SCHEMA`, and how (quoting at most
    `_MAX_QUOTED` characters of what the producer sent)."""
    prefix = f"batch schema does not match schema version {SCHEMA_VERSION}"
    if schema.names != BATCH_SCHEMA.names:
        names = _quoted(repr(schema.names))
        return f"{prefix}: {len(schema.names)} columns {names}, expected {BATCH_SCHEMA.names}"
    for got, expected in zip(schema, BATCH_SCHEMA, strict=True):
        if not got.equals(expected):
            nullable = "" if got.nullable == expected.nullable else f" nullable={got.nullable}"
            return (
                f"{prefix}: column {got.name!r} has type {_quoted(str(got.type))}{nullable}, "
                f"expected {expected.type}" + ("" if expected.nullable else " not nullable")
            )
    return prefix


def _quoted(text: str) -> str:
    """`text` cut to `_MAX_QUOTED` characters, saying how many were left out."""
    if len(text) <= _MAX_QUOTED:
        return text
    return f"{text[:_MAX_QUOTED]}... ({len(text) - _MAX_QUOTED} more characters)"


def check_buffers(batch: pa.RecordBatch) -> None:
    """Check every buffer of every column (Arrow's full validation: offsets, lengths,
    null counts against the validity bitmaps, UTF-8, children), naming the column
    that lies.

    The IPC reader trusts a stream's offsets, lengths and null counts; reading
    values through a lying offset reads memory outside the batch. Costs
    about one pass over each column's offsets (see docs/validation.md).
    """
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        try:
            column.validate(full=True)
        except pa.ArrowException as exc:
            raise BatchFormatError(f"column {name!r}: {exc}") from None


def validate_batch(data: bytes | memoryview, count: int, max_message_bytes: int) -> pa.RecordBatch:
    """Decode and check a producer's batch before anything acknowledges it: the
    schema, every column's buffers in full (`check_buffers`), the declared count,
    each message's size (`check_message_sizes`, when `max_message_bytes` > 0). The
    one check of a batch, at the gateway and again at storage."""
    batch = decode_valid_batch(data)
    if batch.num_rows != count:
        raise BatchFormatError(f"batch declares {count} messages but holds {batch.num_rows}")
    if batch.num_rows == 0:
        raise BatchFormatError("batch is empty")
    if batch.column("payload").null_count:
        raise BatchFormatError("column 'payload' must not be null")
    if max_message_bytes > 0:
        try:
            check_message_sizes(batch, max_message_bytes)
        except MessageTooLarge as exc:
            raise BatchFormatError(str(exc)) from None
    return batch


def encode_record_batch(batch: pa.RecordBatch) -> bytes:
    """One record batch as an IPC stream (the form every hop carries)."""
    return bytes(ipc_buffer(batch).to_pybytes())


#: Batches from this size on are encoded into a buffer of their exact size.
_SIZED_ENCODE_BYTES = 256 * 1024


def ipc_buffer(batch: pa.RecordBatch) -> pa.Buffer:
    """`encode_record_batch` without the copy into `bytes` (for `tamto_protocol.wire`).

    A growing output stream reallocates as it doubles, and each larger buffer is
    fresh memory the kernel faults in; for a batch of a few MiB that cost more
    than the copy itself. Large batches are measured first (a mock stream counts
    the bytes without copying them) and written once into a buffer of that size;
    small ones, where the second pass would cost more than it saves, are not.
    """
    if batch.get_total_buffer_size() < _SIZED_ENCODE_BYTES:
        if batch.schema.equals(BATCH_SCHEMA, check_metadata=True):
            # The same bytes as a stream writer's (schema, batch, end of stream), without
            # opening one: that cost 40x the batch's own encoding at one message.
            return pa.py_buffer(b"".join([_SCHEMA_MESSAGE, batch.serialize(), _END_OF_STREAM]))
        sink = pa.BufferOutputStream()
        _write_stream(sink, batch)
        return sink.getvalue()
    mock = pa.MockOutputStream()
    _write_stream(mock, batch)
    buffer = pa.allocate_buffer(mock.size())
    _write_stream(pa.FixedSizeBufferWriter(buffer), batch)
    return buffer


def _write_stream(sink: Any, batch: pa.RecordBatch) -> None:
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)


def slice_batch(data: bytes, start: int, length: int) -> bytes:
    """Re-encode rows [start, start+length) of an IPC batch as a new IPC stream.

    Used only where a consumer must not see part of a stored batch (already
    acked messages, a start offset inside a batch); whole batches travel as-is.
    The slice is checked in full first (`check_buffers`, about a tenth of the
    re-encoding's cost): re-encoding copies the bytes its offsets point at, so a
    lying offset would put memory from outside the batch into a well-formed one
    that no later check could tell from what a producer sent.
    """
    sliced = decode_batch(data).slice(start, length)
    check_buffers(sliced)
    return encode_record_batch(sliced)
