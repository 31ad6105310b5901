"""Hypothesis strategies for fuzzing Tamto's edge: Arrow buffers and gateway requests.

- `arrow_buffers`: IPC streams from a corpus of valid and crafted batches
  (`tamto_testing.crafted_batches`), mutated: bits flipped, 32/64-bit words
  overwritten with boundary values (the way offsets, lengths and null counts
  lie), bytes zeroed, the stream truncated or spliced with another.
- `requests(descriptor)`: any protobuf message of a request type, built from
  its descriptor (every field optional, nested messages, repeated fields, maps,
  open enums), with names drawn partly from `NAMES` so that requests reach past
  the "not found" checks, and `arrow_ipc` fields from `arrow_buffers`.
- `SETTINGS`: the hypothesis settings of every fuzz test. CI runs a short,
  derandomized campaign; TAMTO_LONG_TESTS=1 runs a long, random one (see
  docs/testing.md, Fuzzing).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tamto_protocol.batch import BatchColumns, encode_batch
from tamto_testing.crafted_batches import CRAFTED, valid_batch
from tamto_testing.waiting import long_tests_enabled

LONG = long_tests_enabled()


def fuzz_settings(ci_examples: int, long_examples: int) -> settings:
    """Short and reproducible in CI (derandomized), long and random with TAMTO_LONG_TESTS=1."""
    return settings(
        max_examples=long_examples if LONG else ci_examples,
        derandomize=not LONG,
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.function_scoped_fixture,
            HealthCheck.data_too_large,
        ],
    )


def _small_batch(rows: int, headers: bool) -> bytes:
    return encode_batch(
        BatchColumns(
            payloads=[b"p%d" % i for i in range(rows)],
            keys=[b"k" if i % 2 else None for i in range(rows)],
            headers=[{"h": "v"} if headers else None for _ in range(rows)],
            ids=[f"fuzz:{i}" for i in range(rows)],
            event_times_us=[None] * rows,
            producer="fuzz",
        )
    )


#: Valid batches first (mutations of them are the likeliest to stay readable), then the crafted.
CORPUS: list[bytes] = [
    _small_batch(1, False),
    _small_batch(3, True),
    valid_batch(),
    *(c.arrow_ipc for c in CRAFTED.values()),
]

_BOUNDARY = [0, 1, 2, 7, 8, 9, 12, 255, 4000, 65536, 2**31 - 1, -1, -2, -(2**31)]


@st.composite
def arrow_buffers(draw: st.DrawFn) -> bytes:
    """A corpus batch, possibly mutated (see the module docstring)."""
    data = bytearray(draw(st.sampled_from(CORPUS)))
    for _ in range(draw(st.integers(0, 4))):
        if not data:
            break
        kind = draw(st.sampled_from(["flip", "int32", "int64", "zero", "truncate", "splice"]))
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "int32" and at + 4 <= len(data):
            value = draw(st.sampled_from(_BOUNDARY) | st.integers(-(2**31), 2**31 - 1))
            data[at : at + 4] = struct.pack("<i", value)
        elif kind == "int64" and at + 8 <= len(data):
            value = draw(st.sampled_from(_BOUNDARY) | st.integers(-(2**63), 2**63 - 1))
            data[at : at + 8] = struct.pack("<q", value)
        elif kind == "zero":
            data[at : at + draw(st.integers(1, 16))] = bytes(min(16, len(data) - at))[:16]
        elif kind == "truncate":
            del data[at:]
        elif kind == "splice":
            other = draw(st.sampled_from(CORPUS))
            data[at:] = other[draw(st.integers(0, len(other) - 1)) :]
    return bytes(data)


#: Names requests use besides random text; the fuzz tests create these streams.
NAMES = ["fuzz-a", "fuzz-b"]

_TEXT = st.text(max_size=40) | st.sampled_from(["", "x" * 300, "a/b", "..", "é", "\x00"])
_NAME_FIELDS = {"stream", "name", "subscription", "stream_name"}


def _scalar(field: FieldDescriptor, names: list[str]) -> st.SearchStrategy[Any]:
    t = field.type
    if t == FieldDescriptor.TYPE_STRING:
        if field.name in _NAME_FIELDS and names:
            return st.sampled_from(names) | _TEXT
        return _TEXT
    if t == FieldDescriptor.TYPE_BYTES:
        return arrow_buffers() if field.name == "arrow_ipc" else st.binary(max_size=64)
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(allow_nan=True, allow_infinity=True, width=32)
    if t == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None
        known = [v.number for v in field.enum_type.values]
        return st.sampled_from(known) | st.integers(-5, 50)
    signed = t in (
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_SFIXED32,
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_SFIXED64,
    )
    wide = t in (
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_SFIXED64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_FIXED64,
    )
    bits = 64 if wide else 32
    low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    edges = [v for v in (low, high, -1, 0, 1, 2, 3, 1000) if low <= v <= high]
    return st.sampled_from(edges) | st.integers(low, high) | st.integers(0, 5)


def requests(descriptor: Any, names: list[str] = NAMES, depth: int = 0) -> Any:
    """Any message of `descriptor`'s type (see the module docstring)."""
    cls = GetMessageClass(descriptor)
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            entry = field.message_type
            assert entry is not None
            if entry.GetOptions().map_entry:
                key = _scalar(entry.fields_by_name["key"], names)
                value_field = entry.fields_by_name["value"]
                if value_field.type == FieldDescriptor.TYPE_MESSAGE:
                    continue
                fields[field.name] = st.dictionaries(key, _scalar(value_field, names), max_size=3)
                continue
            if depth >= 3:
                continue
            one: st.SearchStrategy[Any] = st.deferred(
                lambda entry=entry: requests(entry, names, depth + 1)  # type: ignore[misc]
            )
        else:
            one = _scalar(field, names)
        repeated = bool(getattr(field, "is_repeated", False)) or (
            getattr(field, "label", None) == FieldDescriptor.LABEL_REPEATED
        )
        fields[field.name] = st.lists(one, max_size=4) if repeated else one
    build: Callable[[dict[str, Any]], Message] = lambda values: cls(**values)  # noqa: E731
    return st.fixed_dictionaries({}, optional=fields).map(build)
