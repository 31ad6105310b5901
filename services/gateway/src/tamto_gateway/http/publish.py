"""Publishing over HTTP: a request body becomes one Arrow batch per partition, each
published through the gateway's own Publish (authorization, checks, the append),
and the answer says where every message landed once all of them are durable.

Bodies by content type:
- `application/json`: one message whose payload is the JSON document as sent;
- `application/x-ndjson`: a batch, one message object per line (`message_json`);
- `application/vnd.apache.arrow.stream`: a batch already in Tamto's Arrow schema
  (`tamto_protocol.batch.BATCH_SCHEMA`), passed on as it is, to one partition;
- anything else (`application/octet-stream`, `text/plain`, ...): one message whose
  payload is the body's bytes.
A single message's key, id and partition come from the query (`key`, `id`,
`partition`), its headers from `Tamto-Header-<name>` request headers.

Messages with a `partition` go there, keyed ones to `partition_for_key` (as the
SDK's), the rest of one request to one partition, taking turns between requests.
A batch spanning partitions is published to each at once: if one publish fails,
the others may be durable already (ids make a retry safe: the dedup window).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tamto_common.errors import InvalidArgument
from tamto_common.names import check_name
from tamto_common.policy import Permission
from tamto_gateway.http.auth import HttpCall
from tamto_gateway.http.message_json import outgoing_message
from tamto_gateway.http.model import OutgoingMessage, PartitionBatch, Position
from tamto_protocol.batch import BatchColumns, BatchFormatError, decode_valid_batch, encode_batch
from tamto_protocol.partitioning import partition_for_key
from tamto_protocol.v1 import gateway_pb2, messages_pb2

if TYPE_CHECKING:
    from tamto_common.guard import Guard
    from tamto_gateway.grpc_api import GatewayServicer
    from tamto_gateway.streams import StreamRegistry

JSON = "application/json"
NDJSON = "application/x-ndjson"
ARROW_STREAM = "application/vnd.apache.arrow.stream"
#: Request headers that carry a single message's headers: `Tamto-Header-<name>`.
HEADER_PREFIX = "tamto-header-"


def single_message(
    body: bytes, media_type: str, query: Mapping[str, str], headers: Mapping[str, str]
) -> OutgoingMessage:
    """The message of a JSON or raw body (module docstring)."""
    if media_type == JSON:
        try:
            json.loads(body)
        except ValueError as exc:
            raise InvalidArgument(f"the body is not valid JSON: {exc}") from None
    message_headers = {
        name[len(HEADER_PREFIX) :]: value
        for name, value in headers.items()
        if name.startswith(HEADER_PREFIX)
    }
    key = query.get("key")
    return OutgoingMessage(
        payload=body,
        key=None if key is None else key.encode(),
        headers=message_headers or None,
        id=query.get("id"),
        partition=query_partition(query),
    )


def query_partition(query: Mapping[str, str]) -> int | None:
    """The `partition` query parameter, if any."""
    text = query.get("partition")
    if text is None:
        return None
    if not text.isdigit():
        raise InvalidArgument(f"partition must be an integer >= 0, got {text!r}")
    return int(text)


def ndjson_messages(body: bytes) -> list[OutgoingMessage]:
    """The messages of an NDJSON body, one object per non-empty line."""
    out = []
    for number, line in enumerate(body.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise InvalidArgument(f"line {number} is not valid JSON: {exc}") from None
        out.append(outgoing_message(item, f"line {number}"))
    if not out:
        raise InvalidArgument("the body holds no message")
    return out


class Publisher:
    """Publishes a request's messages through the gateway's Publish (module docstring)."""

    def __init__(self, servicer: GatewayServicer, streams: StreamRegistry, guard: Guard) -> None:
        self._servicer = servicer
        self._streams = streams
        self._guard = guard
        self._turns = itertools.count()

    async def partitions(self, call: HttpCall, stream: str) -> int:
        """The stream's partition count, once the caller may publish to it (the
        stream's existence is not told to whoever may not)."""
        check_name("stream", stream)
        principal = await self._guard.principal(call.invocation_metadata(), call.peer(), "Publish")
        await self._guard.require(principal, Permission.PUBLISH, stream, call.peer(), "Publish")
        return (await self._streams.describe(stream)).partitions

    async def publish(
        self, call: HttpCall, stream: str, messages: list[OutgoingMessage], count: int
    ) -> list[Position]:
        """Publish `messages` to a stream of `count` partitions; where each landed, in
        order."""
        turn = next(self._turns) % count
        chosen = [_partition(m, count, turn) for m in messages]
        outside = sorted(p for p in set(chosen) if p >= count)
        if outside:  # refused before any partition is published to
            raise InvalidArgument(
                f"stream {stream!r} has partitions 0-{count - 1}, not {outside[0]}"
            )
        by_partition: dict[int, list[int]] = {}
        for index, partition in enumerate(chosen):
            by_partition.setdefault(partition, []).append(index)
        batches = [
            PartitionBatch(p, _encode([messages[i] for i in indexes]), len(indexes))
            for p, indexes in by_partition.items()
        ]
        answers = await asyncio.gather(*(self.publish_batch(call, stream, b) for b in batches))
        placed: list[Position | None] = [None] * len(messages)
        for indexes, offsets in zip(by_partition.values(), answers, strict=True):
            for index, place in zip(indexes, offsets, strict=True):
                placed[index] = place
        return [p for p in placed if p is not None]

    async def publish_arrow(
        self, call: HttpCall, stream: str, body: bytes, partition: int | None, count: int
    ) -> list[Position]:
        """Publish an Arrow IPC body as it is, to `partition` or the next in turn of
        the stream's `count`."""
        try:
            rows = decode_valid_batch(body).num_rows
        except BatchFormatError as exc:
            raise InvalidArgument(f"malformed batch: {exc}") from None
        if partition is None:
            partition = next(self._turns) % count
        return await self.publish_batch(call, stream, PartitionBatch(partition, body, rows))

    async def publish_batch(
        self, call: HttpCall, stream: str, batch: PartitionBatch
    ) -> list[Position]:
        """Publish one encoded batch to one partition; where each message landed."""
        response = await self._servicer.Publish(
            gateway_pb2.PublishRequest(
                stream=stream,
                partition=batch.partition,
                batch=messages_pb2.RecordBatch(arrow_ipc=batch.arrow_ipc, count=batch.count),
            ),
            call,
        )
        offsets = list(response.offsets) or [
            response.base_offset + i for i in range(response.count)
        ]
        return [Position(response.partition, o) for o in offsets]


def _partition(message: OutgoingMessage, count: int, turn: int) -> int:
    if message.partition is not None:
        return message.partition
    if message.key is not None:
        return partition_for_key(message.key, count)
    return turn


def warm_up() -> None:
    """Encode one message, once, at start: pyarrow's first conversion of Python values
    imports pandas (a second or more, holding the event loop), which the gateway's
    first HTTP publish would otherwise pay, and every other call with it."""
    _encode([OutgoingMessage(b"")])


def _encode(messages: list[OutgoingMessage]) -> bytes:
    return encode_batch(
        BatchColumns(
            payloads=[m.payload for m in messages],
            keys=[m.key for m in messages],
            headers=[m.headers for m in messages],
            ids=[m.id for m in messages],
            event_times_us=[m.event_time_us for m in messages],
        )
    )
