"""A request whose bytes do not parse is refused alone, naming what is wrong in it.

gRPC parses each request with the method's deserializer before the servicer sees
it; a failure there answered a unary call UNKNOWN "DecodeError", and on a stream
it ended the whole stream with INTERNAL, so the valid calls pipelined after a bad
frame were never answered. `lenient` wraps a deserializer so that it never raises:
bytes that do not parse become an `Undecodable`, which our code turns into
INVALID_ARGUMENT for that request alone (`tamto_common.grpc_errors` for unary
calls and plain streams, `tamto_common.pipelined` for pipelined ones).

Protobuf's error says only the message type ("String field had bad UTF-8"), so
`Undecodable` walks the wire format itself to name the field (the first string
that is not UTF-8, the field whose bytes run past the end), and reads the
request's `call_id` (field 15 of every pipelined request) where it can, so the
answer to a bad frame names the call it refuses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError

from tamto_common.errors import InvalidArgument

#: The field number of `call_id` in every request sent on a pipelined stream.
CALL_ID_FIELD = 15
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_MAX_DEPTH = 32


@dataclass(frozen=True, slots=True)
class Undecodable:
    """The bytes of one request that did not parse as `message_type`."""

    message_type: str
    problem: str
    #: The request's call_id if one could be read (0: none).
    call_id: int = 0

    def error(self) -> InvalidArgument:
        """The refusal of this request."""
        return InvalidArgument(f"malformed {self.message_type}: {self.problem}")


def lenient(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """`deserializer` (a generated message's ``FromString``), returning an
    `Undecodable` for bytes it refuses instead of raising."""
    message_class = getattr(deserializer, "__self__", None)
    descriptor: Descriptor | None = getattr(message_class, "DESCRIPTOR", None)

    def parse(data: bytes) -> Any:
        try:
            return deserializer(data)
        except (DecodeError, RuntimeError, ValueError) as exc:
            if descriptor is None:
                return Undecodable("request", str(exc))
            problem, call_id = _diagnose(descriptor, memoryview(data))
            return Undecodable(descriptor.full_name, problem or _short(exc), call_id)

    return parse


def carries_call_id(deserializer: Callable[[bytes], Any]) -> bool:
    """Whether the requests `deserializer` parses are pipelined calls (they have a
    `call_id`, `tamto_common.pipelined`)."""
    descriptor = getattr(getattr(deserializer, "__self__", None), "DESCRIPTOR", None)
    field = descriptor.fields_by_number.get(CALL_ID_FIELD) if descriptor is not None else None
    return field is not None and field.name == "call_id"


def _short(exc: BaseException) -> str:
    """Protobuf's own account, without the type name `Undecodable.error` gives."""
    text = str(exc)
    return text.rsplit("': ", 1)[-1] if "': " in text else text


class _Truncated(Exception):
    """The bytes end inside a field, or a field's wire type is not one protobuf has
    (its length unknown, nothing after it can be read either)."""

    def __init__(self, reason: str = "truncated") -> None:
        super().__init__(reason)
        self.reason = reason


def _diagnose(descriptor: Descriptor, data: memoryview) -> tuple[str | None, int]:
    """The first problem found in `data` (None: none found) and its top-level call_id."""
    call_id = 0
    problem = None
    at = 0
    while at < len(data):
        try:
            number, kind, value, at = _next_field(data, at)
        except _Truncated as exc:
            return problem or _truncated_after(descriptor, data, exc.reason), call_id
        field = descriptor.fields_by_number.get(number)
        if number == CALL_ID_FIELD and kind == _VARINT and isinstance(value, int):
            call_id = value
        if problem is None and field is not None:
            problem = _field_problem(field, kind, value, 0)
    return problem, call_id


def _truncated_after(descriptor: Descriptor, data: memoryview, reason: str) -> str:
    """Which field the bytes end or break in (the last one that began)."""
    at, last = 0, None
    while at < len(data):
        try:
            number, _, _, at = _next_field(data, at)
        except _Truncated:
            break
        last = number
    begun = _read_tag_number(data, at)
    field = descriptor.fields_by_number.get(begun) if begun is not None else None
    where = f"field {field.name!r}" if field is not None else f"after field {last}"
    return f"the bytes end or break inside {where} ({reason})"


def _read_tag_number(data: memoryview, at: int) -> int | None:
    try:
        tag, _ = _varint(data, at)
    except _Truncated:
        return None
    return tag >> 3


def _field_problem(field: FieldDescriptor, kind: int, value: Any, depth: int) -> str | None:
    """What is wrong with one field's value (None: nothing found)."""
    name = f"field {field.name!r}"
    if kind != _LENGTH or not isinstance(value, memoryview):
        return None  # a scalar: protobuf keeps a mismatched one as an unknown field
    if field.type == FieldDescriptor.TYPE_STRING:
        try:
            bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return f"{name} is not valid UTF-8"
        return None
    if field.message_type is not None and depth < _MAX_DEPTH:
        inner = _nested_problem(field.message_type, value, depth + 1)
        return None if inner is None else f"{name}: {inner}"
    return None


def _nested_problem(descriptor: Descriptor, data: memoryview, depth: int) -> str | None:
    at = 0
    while at < len(data):
        try:
            number, kind, value, at = _next_field(data, at)
        except _Truncated as exc:
            return _truncated_after(descriptor, data, exc.reason)
        field = descriptor.fields_by_number.get(number)
        if field is not None:
            problem = _field_problem(field, kind, value, depth)
            if problem is not None:
                return problem
    return None


def _next_field(data: memoryview, at: int) -> tuple[int, int, int | memoryview | None, int]:
    """The field at `at`: number, wire type, value (an int, the bytes of a
    length-delimited field, None for others), and where the next field starts."""
    tag, at = _varint(data, at)
    number, kind = tag >> 3, tag & 7
    if kind == _VARINT:
        value, at = _varint(data, at)
        return number, kind, value, at
    if kind in (_FIXED64, _FIXED32):
        end = at + (8 if kind == _FIXED64 else 4)
        if end > len(data):
            raise _Truncated
        return number, kind, None, end
    if kind == _LENGTH:
        length, at = _varint(data, at)
        if at + length > len(data):
            raise _Truncated
        return number, kind, data[at : at + length], at + length
    raise _Truncated(f"wire type {kind}")  # groups, invalid types: nothing more is read


def _varint(data: memoryview, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while at < len(data) and shift < 64:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    raise _Truncated
