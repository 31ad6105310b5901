"""Messages as JSON: what a publish body holds and what a consumer receives.

A payload is shown as exactly one of `value` (the payload is a JSON document: its
value), `text` (UTF-8 text that is not JSON) or `base64` (anything else); a
publisher may send any of the three. A key is `key` (UTF-8) or `key_base64`.
Delivered batches are decoded here from the stored Arrow bytes.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from tamto_common.errors import InvalidArgument
from tamto_gateway.http.model import OutgoingMessage, Position, ReceivedMessage
from tamto_protocol.batch import decode_batch
from tamto_protocol.v1 import messages_pb2

#: The members a message object of a publish may have.
MESSAGE_FIELDS = frozenset(
    {"value", "text", "base64", "key", "key_base64", "headers", "id", "event_time_us", "partition"}
)


def outgoing_message(item: object, where: str) -> OutgoingMessage:
    """One message object of a publish (an NDJSON line); `where` names it in errors."""
    if not isinstance(item, dict):
        raise InvalidArgument(f"{where}: a message must be a JSON object")
    unknown = sorted(set(item) - MESSAGE_FIELDS)
    if unknown:
        raise InvalidArgument(f"{where}: unknown member {unknown[0]!r}")
    return OutgoingMessage(
        payload=_payload(item, where),
        key=_key(item, where),
        headers=_headers(item.get("headers"), where),
        id=_optional(item, "id", str, where),
        event_time_us=_optional(item, "event_time_us", int, where),
        partition=_partition(item.get("partition"), where),
    )


def _payload(item: dict[str, Any], where: str) -> bytes:
    given = [name for name in ("value", "text", "base64") if name in item]
    if len(given) != 1:
        raise InvalidArgument(f"{where}: a message needs exactly one of value, text or base64")
    name = given[0]
    if name == "value":
        return json.dumps(item["value"], separators=(",", ":")).encode()
    if not isinstance(item[name], str):
        raise InvalidArgument(f"{where}: {name} must be a string")
    return item[name].encode() if name == "text" else _unbase64(item[name], f"{where}: base64")


def _key(item: dict[str, Any], where: str) -> bytes | None:
    if "key" in item and "key_base64" in item:
        raise InvalidArgument(f"{where}: give key or key_base64, not both")
    if item.get("key_base64") is not None:
        text = _optional(item, "key_base64", str, where)
        return _unbase64(text or "", f"{where}: key_base64")
    key = _optional(item, "key", str, where)
    return None if key is None else key.encode()


def _unbase64(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgument(f"{where} is not valid base64") from None


def _headers(value: object, where: str) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise InvalidArgument(f"{where}: headers must be an object of strings")
    return value


def _partition(value: object, where: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidArgument(f"{where}: partition must be an integer >= 0")
    return value


def _optional(item: dict[str, Any], name: str, kind: type, where: str) -> Any:
    value = item.get(name)
    if value is None:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InvalidArgument(f"{where}: {name} must be a {'string' if kind is str else 'number'}")
    return value


def received_json(message: ReceivedMessage) -> dict[str, Any]:
    """A delivered message as JSON (the `Message` schema of /openapi.json)."""
    out: dict[str, Any] = {
        "partition": message.partition,
        "offset": message.offset,
        "delivery_count": message.delivery_count,
        "publish_time_us": message.publish_time_us,
    }
    out.update(payload_json(message.payload))
    if message.key is not None:
        try:
            out["key"] = message.key.decode()
        except UnicodeDecodeError:
            out["key_base64"] = base64.b64encode(message.key).decode()
    out["headers"] = message.headers
    for name in ("id", "event_time_us", "producer"):
        value = getattr(message, name)
        if value is not None:
            out[name] = value
    return out


def payload_json(payload: bytes) -> dict[str, Any]:
    """`{"value": ...}`, `{"text": ...}` or `{"base64": ...}` (module docstring)."""
    try:
        text = payload.decode()
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(payload).decode()}
    try:
        return {"value": json.loads(text)}
    except ValueError:
        return {"text": text}


def delivered(delivery: messages_pb2.Delivery) -> list[ReceivedMessage]:
    """The messages of one delivery, decoded from its stored Arrow batch."""
    batch = decode_batch(delivery.batch.arrow_ipc)
    offsets = list(delivery.offsets) or [
        delivery.batch.base_offset + i for i in range(batch.num_rows)
    ]
    columns = {name: batch.column(name).to_pylist() for name in batch.schema.names}
    event_times = batch.column("event_time").cast("int64").to_pylist()
    return [
        ReceivedMessage(
            partition=delivery.partition,
            offset=offsets[i],
            delivery_count=delivery.delivery_count,
            publish_time_us=delivery.batch.publish_time_us,
            payload=columns["payload"][i],
            key=columns["key"][i],
            headers=dict(columns["headers"][i] or []),
            id=columns["id"][i],
            event_time_us=event_times[i],
            producer=columns["producer"][i],
        )
        for i in range(batch.num_rows)
    ]


def positions(body: object) -> list[Position]:
    """The `messages` of an ack or nack body: `[{"partition": p, "offset": o}, ...]`."""
    items = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(items, list) or not items:
        raise InvalidArgument('the body needs "messages": [{"partition": p, "offset": o}, ...]')
    out = []
    for i, item in enumerate(items):
        partition = item.get("partition") if isinstance(item, dict) else None
        offset = item.get("offset") if isinstance(item, dict) else None
        if not _natural(partition) or not _natural(offset):
            raise InvalidArgument(f"messages[{i}] needs integer partition and offset >= 0")
        out.append(Position(partition, offset))  # type: ignore[arg-type]
    return out


def _natural(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
