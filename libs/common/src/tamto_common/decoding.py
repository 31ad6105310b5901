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
from tamto_protocol.delivery_wire import WireError, read_fields

#: The field number of `call_id` in every request sent on a pipelined stream.
CALL_ID_FIELD = 15
_VARINT = 0
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


def _diagnose(descriptor: Descriptor, data: memoryview) -> tuple[str | None, int]:
    """The first problem found in `data` (None: none found) and its top-level call_id.
    The fields after a bad one are read on, for the call_id (the last field)."""
    call_id, problem = 0, None
    try:
        for number, kind, value in read_fields(data):
            field = descriptor.fields_by_number.get(number)
            if number == CALL_ID_FIELD and kind == _VARINT and isinstance(value, int):
                call_id = value
            if problem is None and field is not None:
                problem = _field_problem(field, value, 0)
    except WireError as exc:
        return problem or _broken(descriptor, exc), call_id
    return problem, call_id


def _broken(descriptor: Descriptor, exc: WireError) -> str:
    """Where the wire format breaks: inside which field, and how."""
    field = descriptor.fields_by_number.get(exc.field) if exc.field is not None else None
    if field is not None:
        where = f"field {field.name!r}"
    elif exc.field is not None:
        where = f"field number {exc.field}"
    else:
        where = "a field's tag"
    return f"the bytes end or break inside {where} ({exc})"


def _field_problem(field: FieldDescriptor, value: Any, depth: int) -> str | None:
    """What is wrong with one field's value (None: nothing found). A scalar of the
    wrong wire type is no error: protobuf keeps it as an unknown field."""
    if not isinstance(value, memoryview):
        return None
    name = f"field {field.name!r}"
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
    try:
        for number, _, value in read_fields(data):
            field = descriptor.fields_by_number.get(number)
            problem = None if field is None else _field_problem(field, value, depth)
            if problem is not None:
                return problem
    except WireError as exc:
        return _broken(descriptor, exc)
    return None
