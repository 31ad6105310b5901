"""Publish-path requests written straight to the protobuf wire format.

A batch is megabytes of Arrow bytes. Building a request message copies them into
the message, and serialising it copies them again, at every hop (SDK, gateway,
router), and each copy into a fresh multi-megabyte buffer also pays its page
faults. These encoders write the very bytes `SerializeToString` would (field
order, proto3 defaults left out; the tests check it) in one join, from `bytes`
or any buffer such as the `pyarrow.Buffer` an IPC writer returns. They are sent
through `raw_unary`, whose request serializer passes bytes through; responses
are parsed by the generated classes as usual. The contracts stay the `.proto`
files: a receiver cannot tell these requests from generated ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import grpc

if TYPE_CHECKING:
    from typing_extensions import Buffer

_UINT64 = (1 << 64) - 1

#: Full method names of the calls sent with these encoders.
PUBLISH = "/tamto.v1.Gateway/Publish"
ROUTER_APPEND = "/tamto.v1.Router/Append"
STORAGE_APPEND = "/tamto.v1.Storage/Append"
PUBLISH_STREAM = "/tamto.v1.Gateway/PublishStream"
ROUTER_APPEND_STREAM = "/tamto.v1.Router/AppendStream"
#: A client's publish straight to the owner router (the direct path).
ROUTER_PUBLISH = "/tamto.v1.Router/Publish"
ROUTER_PUBLISH_STREAM = "/tamto.v1.Router/PublishStream"
STORAGE_APPEND_STREAM = "/tamto.v1.Storage/AppendStream"
#: An ephemeral publish (`publish_ephemeral_request`), unary and pipelined.
PUBLISH_EPHEMERAL = "/tamto.v1.Gateway/PublishEphemeral"
PUBLISH_EPHEMERAL_STREAM = "/tamto.v1.Gateway/PublishEphemeralStream"
#: Request/reply, unary and pipelined (generated messages with a `call_id`).
REQUEST = "/tamto.v1.Gateway/Request"
REQUEST_STREAM = "/tamto.v1.Gateway/RequestStream"
REPLY = "/tamto.v1.Gateway/Reply"
REPLY_STREAM = "/tamto.v1.Gateway/ReplyStream"
#: The `call_id` field of every request sent on a pipelined stream.
_CALL_ID = 15


def varint(value: int) -> bytes:
    value &= _UINT64  # negative int64 values take ten bytes, as in protobuf
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def int_field(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value) if value else b""


def len_header(number: int, length: int) -> bytes:
    return varint(number << 3 | 2) + varint(length)


def _text_field(number: int, text: str) -> bytes:
    data = text.encode()
    return len_header(number, len(data)) + data if data else b""


def _record_batch(arrow_ipc: Buffer, count: int) -> list[Buffer]:
    """`RecordBatch` (arrow_ipc = 1, count = 2) as pieces to join."""
    size = memoryview(arrow_ipc).nbytes
    head = len_header(1, size) if size else b""
    return [head, arrow_ipc if size else b"", int_field(2, count)]


def _message_field(number: int, pieces: Sequence[Buffer]) -> list[Buffer]:
    size = sum(memoryview(p).nbytes for p in pieces)
    return [len_header(number, size), *pieces]


#: A `tamto.v1.ProducerOrder`: (producer, last_sequence, after_sequence or None).
Order = tuple[str, int, int | None]


def publish_request(
    stream: str,
    partition: int,
    arrow_ipc: Buffer,
    count: int,
    call_id: int = 0,
    order: Order | None = None,
) -> bytes:
    """`tamto.v1.PublishRequest` {stream = 1, partition = 2, batch = 3, order = 4,
    call_id = 15}; `order` is (producer, last sequence, after sequence or None)."""
    return b"".join(
        [
            _text_field(1, stream),
            int_field(2, partition),
            *_message_field(3, _record_batch(arrow_ipc, count)),
            *(_message_field(4, _producer_order(*order)) if order is not None else ()),
            int_field(_CALL_ID, call_id),
        ]
    )


def order_of(request: Any) -> Order | None:
    """The `Order` a parsed `PublishRequest` or `RouterAppendRequest` carries, if any."""
    if not request.HasField("order"):
        return None
    order = request.order
    after = order.after_sequence if order.HasField("after_sequence") else None
    return (order.producer, order.last_sequence, after)


def _producer_order(producer: str, last: int, after: int | None) -> list[Buffer]:
    """`ProducerOrder` {producer = 1, last_sequence = 2, after_sequence = 3 (optional:
    written when set, even as 0)} as pieces to join."""
    pieces: list[Buffer] = [_text_field(1, producer), int_field(2, last)]
    if after is not None:
        pieces.append(varint(3 << 3) + varint(after))
    return pieces


def publish_ephemeral_request(
    stream: str,
    topic: str,
    arrow_ipc: Buffer,
    count: int,
    call_id: int = 0,
    *,
    more_runs: Sequence[tuple[str, Buffer, int]] = (),
) -> bytes:
    """`tamto.v1.PublishEphemeralRequest` {stream = 1, topic = 2, batch = 3,
    more_runs = 4 [{topic = 1, batch = 2}], call_id = 15}; `more_runs` are
    (topic, Arrow IPC, count) published after the first batch, in order."""
    runs: list[Buffer] = []
    for run_topic, run_ipc, run_count in more_runs:
        runs += _message_field(
            4, [_text_field(1, run_topic), *_message_field(2, _record_batch(run_ipc, run_count))]
        )
    return b"".join(
        [
            _text_field(1, stream),
            _text_field(2, topic),
            *_message_field(3, _record_batch(arrow_ipc, count)),
            *runs,
            int_field(_CALL_ID, call_id),
        ]
    )


#: `tamto.v1.RouterAppendRequest` {stream = 1, partition = 2, batch = 3, order = 4,
#: call_id = 15}: the fields of a `PublishRequest`, so written the same way.
router_append_request = publish_request


def stored_batch_field(
    number: int, base_offset: int, count: int, publish_time_us: int, arrow_ipc: Buffer
) -> list[Buffer]:
    """Field `number` holding a `StoredBatch` {base_offset = 1, count = 2,
    publish_time_us = 3, arrow_ipc = 4}, as pieces to join."""
    size = memoryview(arrow_ipc).nbytes
    stored: list[Buffer] = [
        int_field(1, base_offset),
        int_field(2, count),
        int_field(3, publish_time_us),
    ]
    if size:
        stored += [len_header(4, size), arrow_ipc]
    return _message_field(number, stored)


def storage_append_request(
    stream: str,
    partition: int,
    epoch: int,
    batches: Iterable[tuple[int, int, int, Buffer]],
    call_id: int = 0,
) -> bytes:
    """`tamto.v1.StorageAppendRequest` {partition = 1, epoch = 2, batches = 3, call_id = 15}.

    `batches` are (base_offset, count, publish_time_us, arrow_ipc) of each
    `StoredBatch` {base_offset = 1, count = 2, publish_time_us = 3, arrow_ipc = 4}.
    """
    ref = [_text_field(1, stream), int_field(2, partition)]
    pieces: list[Buffer] = []
    if any(ref):
        pieces += _message_field(1, ref)
    pieces.append(int_field(2, epoch))
    for base_offset, count, publish_time_us, arrow_ipc in batches:
        pieces += stored_batch_field(3, base_offset, count, publish_time_us, arrow_ipc)
    pieces.append(int_field(_CALL_ID, call_id))
    return b"".join(pieces)


def raw_unary(
    channel: grpc.aio.Channel, method: str, response_type: Any
) -> grpc.aio.UnaryUnaryMultiCallable:
    """A unary call of `method` that sends already encoded request bytes."""
    deserialize: Callable[[bytes], Any] = response_type.FromString
    return channel.unary_unary(method, request_serializer=None, response_deserializer=deserialize)
