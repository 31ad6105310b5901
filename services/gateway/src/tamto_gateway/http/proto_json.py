"""The gRPC contract's messages as JSON, both ways, and their JSON Schemas.

The admin routes answer the same messages as the gRPC admin API: this module turns
them into JSON (field names as in the .proto, enums by name, 64-bit integers as
numbers, unset message fields left out) and reads request bodies into them
(`google.protobuf.json_format`: unknown members are refused). `schema` derives each
message's JSON Schema from the same descriptors, so /openapi.json describes exactly
what `to_json` answers.
"""

from __future__ import annotations

import base64
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from tamto_common.errors import InvalidArgument

M = TypeVar("M", bound=Message)
#: A message or field descriptor: the stubs type upb's and pure Python's apart.
Descriptor = Any
Field = Any

_INTEGERS = {
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT32,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED32,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED32,
    FieldDescriptor.TYPE_SFIXED64,
}
_NUMBERS = {FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT}


def to_json(message: Message) -> dict[str, Any]:
    """`message` as a JSON object (module docstring)."""
    out: dict[str, Any] = {}
    fields: list[Field] = list(message.DESCRIPTOR.fields)
    for field in fields:
        value = getattr(message, field.name)
        if _is_map(field):
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {str(k): _value(value_field, v) for k, v in value.items()}
        elif field.is_repeated:
            out[field.name] = [_value(field, v) for v in value]
        elif field.has_presence and not message.HasField(field.name):
            continue
        else:
            out[field.name] = _value(field, value)
    return out


def _value(field: Field, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return to_json(value)
    if field.type == FieldDescriptor.TYPE_ENUM:
        known = field.enum_type.values_by_number.get(value)
        return known.name if known is not None else value
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode()
    return value


def _is_map(field: Field) -> bool:
    return bool(
        field.is_repeated
        and field.type == FieldDescriptor.TYPE_MESSAGE
        and field.message_type.GetOptions().map_entry
    )


def from_json(body: object, into: M, what: str) -> M:
    """Fill `into` from a JSON body; INVALID_ARGUMENT naming what is wrong."""
    if not isinstance(body, dict):
        raise InvalidArgument(f"{what} must be a JSON object")
    try:
        json_format.ParseDict(body, into)
    except json_format.ParseError as exc:
        raise InvalidArgument(f"{what}: {exc}") from None
    return into


def schema(descriptor: Descriptor, schemas: dict[str, Any]) -> dict[str, Any]:
    """A `$ref` to the JSON Schema of `descriptor`, added (with every message it uses)
    to `schemas` (an OpenAPI document's components/schemas)."""
    name = descriptor.name
    if name not in schemas:
        schemas[name] = {}  # placeholder: a message may refer to itself
        schemas[name] = {
            "type": "object",
            "additionalProperties": False,
            "properties": {f.name: _field_schema(f, schemas) for f in descriptor.fields},
        }
    return {"$ref": f"#/components/schemas/{name}"}


def _field_schema(field: Field, schemas: dict[str, Any]) -> dict[str, Any]:
    if _is_map(field):
        value = _scalar_schema(field.message_type.fields_by_name["value"], schemas)
        return {"type": "object", "additionalProperties": value}
    one = _scalar_schema(field, schemas)
    return {"type": "array", "items": one} if field.is_repeated else one


def _scalar_schema(field: Field, schemas: dict[str, Any]) -> dict[str, Any]:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return schema(field.message_type, schemas)
    if field.type == FieldDescriptor.TYPE_ENUM:
        return {"type": "string", "enum": [v.name for v in field.enum_type.values]}
    if field.type in _INTEGERS:
        return {"type": "integer"}
    if field.type in _NUMBERS:
        return {"type": "number"}
    if field.type == FieldDescriptor.TYPE_BOOL:
        return {"type": "boolean"}
    if field.type == FieldDescriptor.TYPE_BYTES:
        return {"type": "string", "contentEncoding": "base64"}
    return {"type": "string"}
