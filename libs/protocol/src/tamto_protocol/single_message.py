"""One message without Arrow (`SingleMessage`): what requests and replies carry when
both ends say they read it.

A request or a reply is one message. As a one-message Arrow batch it cost far
more than its bytes at every end: ~60 µs to encode, ~120 µs to check at the
gateway, ~80 µs to decode, against a few µs for a protobuf message, and that
three or four times per round trip. So a request and its reply travel as a
`SingleMessage` where both ends read it: a gateway says so in the initial
metadata of RequestStream and ReplyStream (`tamto_protocol.capabilities`), a client
in the metadata it opens RequestStream with, a subscriber in its
`SubscribeEphemeralRequest.single_messages`. Anyone else gets the same message
as a one-message batch (`as_batch`), so older clients and gateways see what
they always saw. Its limits are a batch's (`tamto_protocol.message_size`):
payload, key and headers count towards `max_message_bytes`, key and headers
each have their cap.
"""

from __future__ import annotations

import pyarrow as pa

from tamto_protocol.batch import HEADERS_TYPE, KEY_TYPE, PAYLOAD_TYPE, ipc_buffer, make_batch
from tamto_protocol.message_size import MAX_HEADERS_BYTES, MAX_KEY_BYTES, MessageTooLarge
from tamto_protocol.v1 import gateway_pb2, messages_pb2


def check_single_message(message: gateway_pb2.SingleMessage, max_message_bytes: int) -> None:
    """`MessageTooLarge` unless `message` keeps the limits a batch's message keeps
    (`max_message_bytes` 0: no total limit)."""
    key = len(message.key)
    headers = sum(len(name.encode()) + len(text.encode()) for name, text in message.headers.items())
    if key > MAX_KEY_BYTES:
        raise MessageTooLarge(f"the message's key is {key} bytes; at most {MAX_KEY_BYTES}")
    if headers > MAX_HEADERS_BYTES:
        raise MessageTooLarge(
            f"the message's headers are {headers} bytes; at most {MAX_HEADERS_BYTES}"
        )
    total = len(message.payload) + key + headers
    if max_message_bytes > 0 and total > max_message_bytes:
        raise MessageTooLarge(
            f"the message is {total} bytes (payload, key and headers); at most {max_message_bytes}"
        )


def as_batch(message: gateway_pb2.SingleMessage) -> messages_pb2.RecordBatch:
    """`message` as the one-message batch a reader of batches expects."""
    headers = dict(message.headers)
    batch = make_batch(
        pa.array([message.payload], PAYLOAD_TYPE),
        keys=pa.array([message.key], KEY_TYPE) if message.HasField("key") else None,
        headers=pa.array([list(headers.items())], HEADERS_TYPE) if headers else None,
    )
    return messages_pb2.RecordBatch(arrow_ipc=ipc_buffer(batch).to_pybytes(), count=1)
