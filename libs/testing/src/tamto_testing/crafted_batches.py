"""Hostile Arrow batches: IPC streams whose buffers lie, for validation tests and fuzzing.

pyarrow will not build an array whose offsets lie (``Array.from_buffers``
validates), but an attacker writes bytes, not arrays. So each crafted batch
starts as a valid IPC stream from `encode_batch` whose values were chosen to
make one buffer's bytes unique in the stream, and that buffer (or the Arrow
field node that declares a column's length and null count) is then
overwritten in place. The IPC reader accepts every one of them; only full
validation refuses them (`[0, 9, 2]` payload offsets stopped sealing,
`[0, 5, 4000]` leaked server memory to a consumer).

`CRAFTED` maps a case's name to the stream and the column whose name a
refusal must carry; `valid_batch` is the batch they all started from.
"""

from __future__ import annotations

import array
import struct
from dataclasses import dataclass

import pyarrow as pa

from tamto_protocol.batch import BATCH_SCHEMA, BatchColumns, encode_batch, encode_record_batch

#: Rows of `valid_batch`: an odd number no other length or count of the stream equals.
ROWS = 37
#: Rows of `valid_batch` whose key is null (also unique in the stream).
NULL_KEYS = 13


@dataclass(frozen=True)
class Crafted:
    """One hostile batch: its IPC bytes, the rows it claims, the column a refusal names."""

    arrow_ipc: bytes
    count: int
    column: str


def valid_columns() -> BatchColumns:
    """The columns of `valid_batch`: every column set, payload and key lengths distinct."""
    return BatchColumns(
        payloads=[bytes([65 + i % 26]) * (i + 1) for i in range(ROWS)],
        keys=[None if i < NULL_KEYS else b"k%03d" % i for i in range(ROWS)],
        headers=[{f"h{j}": "v" * (j + 1) for j in range(i % 4 + 1)} for i in range(ROWS)],
        ids=[f"id-{i}" for i in range(ROWS)],
        event_times_us=[1_700_000_000_000_000 + i for i in range(ROWS)],
        producer="crafter",
    )


def valid_batch() -> bytes:
    """A valid batch of `ROWS` messages (the base every crafted batch is patched from)."""
    return encode_batch(valid_columns())


def _i32(values: list[int]) -> bytes:
    return array.array("i", values).tobytes()


def _offsets(lengths: list[int]) -> list[int]:
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return out


def _replace_once(data: bytes, old: bytes, new: bytes) -> bytes:
    found = data.count(old)
    if found != 1:
        raise AssertionError(f"the pattern to patch occurs {found} times, not once")
    return data.replace(old, new)


def _patch_offsets(data: bytes, lengths: list[int], change: dict[int, int]) -> bytes:
    """Overwrite entries of the offsets buffer of values with these `lengths`."""
    offsets = _offsets(lengths)
    lying = list(offsets)
    for slot, value in change.items():
        lying[slot] = value
    return _replace_once(data, _i32(offsets), _i32(lying))


def _field_node(length: int, null_count: int) -> bytes:
    return struct.pack("<qq", length, null_count)


def _crafted() -> dict[str, Crafted]:
    columns = valid_columns()
    base = valid_batch()
    payload_lengths = [len(p) for p in columns.payloads]
    payload_bytes = sum(payload_lengths)
    header_counts = [len(h or {}) for h in columns.headers]
    keys = [k for k in columns.keys]
    key_lengths = [len(k) if k is not None else 0 for k in keys]
    id_lengths = [len(i or "") for i in columns.ids]
    cases = {
        # Offsets that lie: decreasing ones, and an end past the data buffer.
        "payload offsets decrease": (
            _patch_offsets(base, payload_lengths, {2: 2, 1: 9}),
            "payload",
        ),
        "payload offset past the data": (
            _patch_offsets(base, payload_lengths, {ROWS: payload_bytes + 4000}),
            "payload",
        ),
        "payload offset negative": (
            _patch_offsets(base, payload_lengths, {0: -3}),
            "payload",
        ),
        "key first offset past the second": (
            _patch_offsets(base, key_lengths, {0: 40}),
            "key",
        ),
        "id offsets decrease": (
            _patch_offsets(base, id_lengths, {5: 1}),
            "id",
        ),
        "headers offsets past the entries": (
            _patch_offsets(base, header_counts, {ROWS: sum(header_counts) + 50}),
            "headers",
        ),
        "headers offsets decrease": (
            _patch_offsets(base, header_counts, {3: 0}),
            "headers",
        ),
        "key null count lies": (
            # Not 0: a null count of 0 makes the reader drop the bitmap (all valid).
            _replace_once(base, _field_node(ROWS, NULL_KEYS), _field_node(ROWS, 5)),
            "key",
        ),
        "key null count exceeds the rows": (
            _replace_once(base, _field_node(ROWS, NULL_KEYS), _field_node(ROWS, ROWS + 5)),
            "key",
        ),
        "id not UTF-8": (
            _replace_once(base, b"id-36", b"id-\xff\xfe"),
            "id",
        ),
    }
    crafted = {name: Crafted(data, ROWS, column) for name, (data, column) in cases.items()}
    crafted.update(_retyped())
    return crafted


def _retyped() -> dict[str, Crafted]:
    """Batches whose schema itself is wrong: dictionary and nested columns."""
    n = 3
    good = {f.name: pa.nulls(n, f.type) for f in BATCH_SCHEMA}
    good["payload"] = pa.array([b"a", b"b", b"c"], pa.binary())

    def batch_with(name: str, array_: pa.Array) -> bytes:
        arrays = dict(good)
        arrays[name] = array_
        i = BATCH_SCHEMA.get_field_index(name)
        field = BATCH_SCHEMA.field(i)
        schema = BATCH_SCHEMA.set(i, pa.field(name, array_.type, nullable=field.nullable))
        return encode_record_batch(pa.RecordBatch.from_arrays(list(arrays.values()), schema=schema))

    dictionary = pa.DictionaryArray.from_arrays(
        pa.array([5, 3, 4], pa.int32()), pa.array([b"%d" % i for i in range(6)], pa.binary())
    )
    lying_indices = _replace_once(batch_with("key", dictionary), _i32([5, 3, 4]), _i32([5, 300, 4]))
    nested = pa.array([[b"a"], [b"b"], [b"c"]], pa.list_(pa.binary()))
    struct_ = pa.array([{"x": b"a"}, {"x": b"b"}, {"x": b"c"}])
    return {
        "key dictionary with lying indices": Crafted(lying_indices, n, "key"),
        "payload nested list": Crafted(batch_with("payload", nested), n, "payload"),
        "headers as a struct": Crafted(batch_with("headers", struct_), n, "headers"),
    }


#: Every crafted batch, by a name saying how it lies.
CRAFTED: dict[str, Crafted] = _crafted()
