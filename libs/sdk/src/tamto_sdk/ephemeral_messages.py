"""Ephemeral messages as an application sees them, and their Arrow encoding.

`EphemeralMessage` and `EphemeralBatch` are what an `EphemeralSubscription` yields;
`encode_arrow`/`encode_messages` turn payloads into the batch a publish or a reply
carries.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa

from tamto_protocol.batch import HEADERS_TYPE, KEY_TYPE, decode_batch, ipc_buffer, make_batch
from tamto_protocol.single_message import as_batch
from tamto_protocol.v1 import messages_pb2
from tamto_sdk.columns import binary_array
from tamto_sdk.errors import InvalidArgument
from tamto_sdk.messages import us_to_datetime

__all__ = ["EphemeralBatch", "EphemeralMessage", "encode_arrow", "encode_messages"]


@dataclass(frozen=True, slots=True)
class EphemeralMessage:
    """One message of an ephemeral stream.

    Attributes:
        stream, topic: where it was published, and under which topic.
        payload, key, headers: as the producer gave them.
        response_stream: set on a request: `client.reply` to it.
        publish_time: when its gateway put it on the bus (aware, UTC).
    """

    stream: str
    topic: str
    payload: bytes
    key: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    response_stream: str = ""
    publish_time: datetime | None = None


@dataclass(frozen=True, slots=True)
class EphemeralBatch:
    """Messages published together (one topic), decoded once.

    `dropped`: messages this consumer lost to its full buffer just before these.
    """

    stream: str
    topic: str
    record_batch: pa.RecordBatch
    response_stream: str = ""
    publish_time: datetime | None = None
    dropped: int = 0

    def __len__(self) -> int:
        return int(self.record_batch.num_rows)

    def __iter__(self) -> Iterator[EphemeralMessage]:
        columns = self.record_batch.to_pydict()
        for payload, key, headers in zip(
            columns["payload"], columns["key"], columns["headers"], strict=True
        ):
            yield EphemeralMessage(
                stream=self.stream,
                topic=self.topic,
                payload=payload,
                key=key,
                headers=dict(headers) if headers else {},
                response_stream=self.response_stream,
                publish_time=self.publish_time,
            )

    @classmethod
    def _from_delivery(cls, delivery: Any) -> EphemeralBatch:
        batch = as_batch(delivery.message) if delivery.HasField("message") else delivery.batch
        return cls(
            stream=delivery.stream,
            topic=delivery.topic,
            record_batch=decode_batch(batch.arrow_ipc),
            response_stream=delivery.response_stream,
            publish_time=us_to_datetime(int(delivery.publish_time_us)),
            dropped=int(delivery.dropped),
        )


def single_message(delivery: Any) -> EphemeralMessage:
    """The message of an `EphemeralDelivery` that carries one as a `SingleMessage`."""
    single = delivery.message
    return EphemeralMessage(
        stream=delivery.stream,
        topic=delivery.topic,
        payload=single.payload,
        key=single.key if single.HasField("key") else None,
        headers=dict(single.headers),
        response_stream=delivery.response_stream,
        publish_time=us_to_datetime(int(delivery.publish_time_us)),
    )


def encode_messages(
    payloads: Sequence[bytes],
    keys: Sequence[bytes | None] | None = None,
    headers: Sequence[Mapping[str, str] | None] | None = None,
) -> messages_pb2.RecordBatch:
    """Payloads (and keys and headers) as one `RecordBatch` message (`encode_arrow`)."""
    arrow_ipc, count = encode_arrow(payloads, keys, headers)
    return messages_pb2.RecordBatch(arrow_ipc=arrow_ipc.to_pybytes(), count=count)


def encode_arrow(
    payloads: Sequence[bytes],
    keys: Sequence[bytes | None] | None = None,
    headers: Sequence[Mapping[str, str] | None] | None = None,
) -> tuple[pa.Buffer, int]:
    """Payloads (and keys and headers) as one Arrow IPC buffer, and their count.

    Keys and headers that are all absent stay null columns: only given ones are
    converted from Python objects, which makes pyarrow import pandas the first
    time (seconds on a loaded machine, in the middle of a publish or request).
    """
    for payload in payloads:
        if not isinstance(payload, bytes | bytearray | memoryview):
            raise InvalidArgument(f"payload must be bytes, got {type(payload).__name__}")
    if keys is not None and all(k is None for k in keys):
        keys = None
    if headers is not None and not any(headers):
        headers = None
    batch = make_batch(
        binary_array([p if isinstance(p, bytes) else bytes(p) for p in payloads]),
        keys=None if keys is None else pa.array(keys, KEY_TYPE),
        headers=None
        if headers is None
        else pa.array([list(h.items()) if h else None for h in headers], HEADERS_TYPE),
    )
    return ipc_buffer(batch), len(payloads)
