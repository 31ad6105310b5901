"""Consume-path responses written straight to the protobuf wire format.

A delivery carries up to megabytes of Arrow bytes. Built as a `ConsumeResponse`
message and serialised, they are copied twice in the router; parsed and
serialised again, twice more in the gateway, which only forwards them. Instead
the router writes the very bytes `SerializeToString` would (field order, proto3
defaults left out; the tests check it) in one join, and the gateway passes the
router's response bytes to its client untouched. Both register their Consume
handler with `raw_responses`, whose response serializer passes bytes through.
The SDK reads a response with `parse_consume_response`, which leaves the batch
where it is (parsing it as a message and reading its bytes field would copy it
twice). The contract stays `messages.proto`: a client cannot tell these
responses from generated ones, and any valid encoding parses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from tamto_protocol.wire import int_field, len_header, varint


def consume_delivery(
    stream: str,
    partition: int,
    base_offset: int,
    count: int,
    publish_time_us: int,
    arrow_ipc: bytes,
    delivery_count: int,
    offsets: Sequence[int] = (),
    mux_session: int | None = None,
) -> bytes:
    """`tamto.v1.ConsumeResponse` {delivery = 1: `Delivery` {stream = 1, partition = 2,
    batch = 3: `StoredBatch` {base_offset = 1, count = 2, publish_time_us = 3,
    arrow_ipc = 4}, delivery_count = 4, offsets = 5 (packed)}}.

    With `mux_session`, that response wrapped as a `tamto.v1.ConsumeMuxResponse`
    {session = 1, consume = 2} of that session, in the same join (one copy)."""
    stored = b"".join(
        [
            int_field(1, base_offset),
            int_field(2, count),
            int_field(3, publish_time_us),
            len_header(4, len(arrow_ipc)) if arrow_ipc else b"",
        ]
    )
    batch_size = len(stored) + len(arrow_ipc)
    name = stream.encode()
    head = b"".join(
        [
            len_header(1, len(name)) + name if name else b"",
            int_field(2, partition),
            len_header(3, batch_size),
            stored,
        ]
    )
    packed = b"".join(varint(o) for o in offsets)
    tail = b"".join(
        [
            int_field(4, delivery_count),
            len_header(5, len(packed)) + packed if packed else b"",
        ]
    )
    delivery_size = len(head) + len(arrow_ipc) + len(tail)
    parts = [len_header(1, delivery_size), head, arrow_ipc, tail]
    if mux_session is not None:
        response_size = len(parts[0]) + delivery_size
        parts[:0] = [int_field(1, mux_session), len_header(2, response_size)]
    return b"".join(parts)


def mux_end(session: int, code: int, message: str) -> bytes:
    """`tamto.v1.ConsumeMuxResponse` {session = 1, end = 3: `CallStatus` {code = 1,
    message = 2}}: the session ended with that status (0: cleanly)."""
    text = message.encode()
    body = int_field(1, code) + (len_header(2, len(text)) + text if text else b"")
    return int_field(1, session) + len_header(3, len(body)) + body


@dataclass(frozen=True, slots=True)
class MuxResponse:
    """A `ConsumeMuxResponse` read: its session and either the encoded
    `ConsumeResponse` to forward or the status the session ended with."""

    session: int
    consume: bytes | None
    end: tuple[int, str] | None


@dataclass(frozen=True, slots=True)
class StoredBatchView:
    base_offset: int
    count: int
    publish_time_us: int
    #: The Arrow bytes, pointing into the response (no copy).
    arrow_ipc: memoryview


@dataclass(frozen=True, slots=True)
class DeliveryView:
    """A `Delivery` read from an encoded `ConsumeResponse` without copying its batch:
    the same attributes as the generated message, `batch.arrow_ipc` a memoryview."""

    stream: str
    partition: int
    batch: StoredBatchView
    delivery_count: int
    offsets: tuple[int, ...]


class WireError(ValueError):
    """The bytes are not valid protobuf wire format (`field`: the number of the field
    they end or break in, when its tag could be read)."""

    def __init__(self, message: str, field: int | None = None) -> None:
        super().__init__(message)
        self.field = field


def _read_varint(data: memoryview, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise WireError("truncated or overlong varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def read_fields(data: memoryview) -> Iterator[tuple[int, int, int | memoryview]]:
    """(field number, wire type, value) of each field; LEN values as memoryviews.
    `WireError` where the bytes end inside a field or a wire type is not protobuf's."""
    at = 0
    while at < len(data):
        key, at = _read_varint(data, at)
        number, kind = key >> 3, key & 7
        value: int | memoryview
        try:
            if kind == 0:
                value, at = _read_varint(data, at)
            elif kind == 2:
                length, at = _read_varint(data, at)
                if at + length > len(data):
                    raise WireError("truncated length-delimited field")
                value, at = data[at : at + length], at + length
            elif kind == 1:
                value, at = int.from_bytes(data[at : at + 8], "little"), at + 8
            elif kind == 5:
                value, at = int.from_bytes(data[at : at + 4], "little"), at + 4
            else:
                raise WireError(f"unsupported wire type {kind}")
            if at > len(data):
                raise WireError("truncated fixed-size field")
        except WireError as exc:
            raise WireError(str(exc), number) from None
        yield number, kind, value


def _int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _stored_batch(data: memoryview) -> StoredBatchView:
    base = count = time_us = 0
    arrow = memoryview(b"")
    for number, kind, value in read_fields(data):
        if kind == 0 and isinstance(value, int):
            if number == 1:
                base = _int64(value)
            elif number == 2:
                count = value & 0xFFFFFFFF
            elif number == 3:
                time_us = _int64(value)
        elif number == 4 and isinstance(value, memoryview):
            arrow = value
    return StoredBatchView(base, count, time_us, arrow)


def consume_error(code: int, message: str) -> bytes:
    """`tamto.v1.ConsumeResponse` {error = 2: `StreamError` {code = 1, message = 2}}: the
    status a server is about to end a consume stream with, sent in-band first."""
    text = message.encode()
    body = int_field(1, code) + (len_header(2, len(text)) + text if text else b"")
    return len_header(2, len(body)) + body


def parse_consume_error(data: bytes) -> tuple[int, str] | None:
    """(code, message) of an encoded `ConsumeResponse` holding a `StreamError`, or None.

    Cheap for deliveries: only the first field's key is looked at.
    """
    if not data or data[0] != 0x12:  # field 2, length-delimited
        return None
    status = 0, ""
    for number, _kind, value in read_fields(memoryview(data)):
        if number == 2 and isinstance(value, memoryview):
            status = _status(value)
    return status


def _status(data: memoryview) -> tuple[int, str]:
    """(code, message) of a `StreamError` or `CallStatus` (the same first two fields)."""
    code, message = 0, ""
    for number, kind, value in read_fields(data):
        if number == 1 and kind == 0 and isinstance(value, int):
            code = value
        elif number == 2 and isinstance(value, memoryview):
            message = bytes(value).decode(errors="replace")
    return code, message


def mux_responses(responses: Sequence[bytes]) -> bytes:
    """`tamto.v1.ConsumeMuxResponses` {responses = 1 (repeated)} of encoded
    `ConsumeMuxResponse`s: what a router sends on a mux in one message."""
    return b"".join([part for r in responses for part in (len_header(1, len(r)), r)])


def parse_mux_responses(data: bytes) -> Iterator[MuxResponse]:
    """The responses of a `ConsumeMuxResponses`, in order (see `parse_mux_response`)."""
    for number, _kind, value in read_fields(memoryview(data)):
        if number == 1 and isinstance(value, memoryview):
            yield parse_mux_response(value)


def parse_mux_response(data: bytes | memoryview) -> MuxResponse:
    """A `ConsumeMuxResponse`; its `consume` bytes are copied once (to be forwarded
    as they are), never parsed. Raises `WireError` on malformed input."""
    session = 0
    consume: bytes | None = None
    end: tuple[int, str] | None = None
    for number, kind, value in read_fields(memoryview(data)):
        if number == 1 and kind == 0 and isinstance(value, int):
            session = value
        elif number == 2 and isinstance(value, memoryview):
            consume, end = bytes(value), None
        elif number == 3 and isinstance(value, memoryview):
            consume, end = None, _status(value)
    if consume is None and end is None:
        raise WireError(f"consume mux response of session {session} holds neither kind")
    return MuxResponse(session, consume, end)


def parse_consume_response(data: bytes) -> DeliveryView | None:
    """The delivery of an encoded `ConsumeResponse` (None if it holds none), its
    batch's Arrow bytes a view into `data`. Raises `WireError` on malformed input.

    Accepts any valid encoding of the message; a field that repeats an embedded
    message (which protobuf would merge) is refused rather than half-merged.
    """
    delivery: memoryview | None = None
    for number, kind, value in read_fields(memoryview(data)):
        if number == 1 and kind == 2 and isinstance(value, memoryview):
            if delivery is not None:
                raise WireError("delivery given twice")
            delivery = value
    if delivery is None:
        return None
    stream = ""
    partition = delivery_count = 0
    batch: StoredBatchView | None = None
    offsets: list[int] = []
    for number, kind, value in read_fields(delivery):
        if number == 1 and isinstance(value, memoryview):
            stream = bytes(value).decode()
        elif number == 2 and kind == 0 and isinstance(value, int):
            partition = value & 0xFFFFFFFF
        elif number == 3 and isinstance(value, memoryview):
            if batch is not None:
                raise WireError("batch given twice")
            batch = _stored_batch(value)
        elif number == 4 and kind == 0 and isinstance(value, int):
            delivery_count = value & 0xFFFFFFFF
        elif number == 5 and isinstance(value, memoryview):  # packed
            at = 0
            while at < len(value):
                offset, at = _read_varint(value, at)
                offsets.append(_int64(offset))
        elif number == 5 and isinstance(value, int):  # unpacked, also valid
            offsets.append(_int64(value))
    if batch is None:
        batch = StoredBatchView(0, 0, 0, memoryview(b""))
    return DeliveryView(stream, partition, batch, delivery_count, tuple(offsets))


def raw_responses(
    server: grpc.aio.Server,
    service: str,
    method: str,
    behavior: Callable[..., Any],
    request_deserializer: Callable[[bytes], Any],
) -> None:
    """Serve the stream-stream `service`/`method` with `behavior`, whose responses
    are already encoded bytes (sent as they are).

    Called after the generated ``add_*Servicer_to_server``: a registered method
    handler added later takes the method over.
    """
    handler = grpc.stream_stream_rpc_method_handler(
        behavior, request_deserializer=request_deserializer, response_serializer=None
    )
    server.add_registered_method_handlers(service, {method: handler})
