"""Ephemeral streams and request/reply in the SDK (docs/ephemeral.md).

- `EphemeralProducer` (`client.ephemeral_producer`): `publish(payload, topic=...)`
  batches messages per topic while the previous batch is in flight, one Arrow
  batch per call, at most once (a failed call is not retried: it may have
  reached consumers).
- `Subscription` (`client.subscribe`): an async iterator of `EphemeralMessage`
  (or of whole `EphemeralBatch`es, `batches()`), selecting topics with a
  RabbitMQ topic pattern, alone or as a member of a group.

Request/reply, built on these, is in `tamto_sdk.replies`.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import importlib
import warnings
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any

import grpc
import pyarrow as pa

from tamto_protocol.batch import HEADERS_TYPE, KEY_TYPE, decode_batch, ipc_buffer, make_batch
from tamto_protocol.v1 import gateway_pb2, messages_pb2
from tamto_protocol.wire import publish_ephemeral_request
from tamto_sdk._calls import Calls
from tamto_sdk._retry import Backoff
from tamto_sdk.columns import binary_array
from tamto_sdk.errors import (
    Closed,
    InvalidArgument,
    TamtoError,
    Unauthenticated,
    Unavailable,
    from_rpc_error,
)
from tamto_sdk.messages import us_to_datetime

__all__ = [
    "EphemeralBatch",
    "EphemeralMessage",
    "EphemeralProducer",
    "Subscription",
]

#: Deliveries a subscription takes per gRPC message, when its gateway has that many
#: buffered (`SubscribeEphemeralRequest.max_deliveries_per_event`).
DELIVERIES_PER_EVENT = 64


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
        return cls(
            stream=delivery.stream,
            topic=delivery.topic,
            record_batch=decode_batch(delivery.batch.arrow_ipc),
            response_stream=delivery.response_stream,
            publish_time=us_to_datetime(int(delivery.publish_time_us)),
            dropped=int(delivery.dropped),
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


#: A queued message: (topic, payload, key, headers).
_Queued = tuple[str, bytes, bytes | None, Mapping[str, str] | None]


class EphemeralProducer:
    """Publishes to one ephemeral stream; use it as an async context manager.

    `publish` queues a message and returns. Messages keep their order whatever
    their topics: one call is in flight at a time, and what was queued meanwhile
    goes in the next, as consecutive runs of one topic each (a call carries the
    first run and `more_runs`, published in that order), at most
    `max_batch_messages` and, unless one message is larger, `max_batch_bytes` of
    payload in all (the bus carries 1 MiB per message, and a gateway slices
    larger batches). `flush` waits until everything queued was taken by a
    gateway, and raises the first error since the last flush.
    """

    def __init__(
        self,
        calls: Calls,
        stream: str,
        *,
        max_batch_messages: int = 1000,
        max_pending: int = 100_000,
        max_batch_bytes: int = 512 << 10,
    ) -> None:
        self._calls = calls
        self._stream = stream
        self._max_batch = max_batch_messages
        self._max_batch_bytes = max_batch_bytes
        self._max_pending = max_pending
        self._queue: collections.deque[_Queued] = collections.deque()
        self._sender: asyncio.Task[None] | None = None
        #: Set once a gateway published only the first run of a call (it predates
        #: `more_runs`): from then on each run goes in a call of its own.
        self._one_run_per_call = False
        self._room = asyncio.Event()
        self._room.set()
        self._error: TamtoError | None = None
        self._closed = False

    @property
    def stream(self) -> str:
        return self._stream

    async def publish(
        self,
        payload: bytes,
        *,
        topic: str = "",
        key: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Queue one message under `topic` (words separated by '.'; the gateway
        checks it, docs/ephemeral.md)."""
        if self._closed:
            raise Closed("producer is closed")
        self._raise_error()
        while len(self._queue) >= self._max_pending:
            self._room.clear()
            await self._room.wait()
        self._queue.append((topic, bytes(payload), key, headers))
        if self._sender is None:
            self._sender = asyncio.create_task(self._send())

    async def publish_batch(self, payloads: Sequence[bytes], *, topic: str = "") -> int:
        """Publish `payloads` under `topic` as one batch now; returns how many
        consuming entities the gateway knew to match (0: they were unmatched)."""
        response = await self._call([(topic, *encode_arrow(payloads))])
        return int(response.matched_entities)

    async def _call(self, runs: Sequence[tuple[str, pa.Buffer, int]]) -> Any:
        """One PublishEphemeral call carrying `runs` (topic, Arrow IPC, count) in order."""
        # Pipelined on the client's one ephemeral publish stream, written in wire form
        # from the IPC buffers: the Arrow bytes are copied once (a generated request
        # copies them into itself and again to serialise).
        (topic, arrow_ipc, count), *more = runs
        request = functools.partial(
            publish_ephemeral_request, self._stream, topic, arrow_ipc, count, more_runs=more
        )
        return await self._calls.unary(self._calls.publish_ephemeral_raw, request, retry=False)

    def _take(self) -> list[_Queued]:
        """The next messages to send: at least one, at most the batch limits."""
        taken = [self._queue.popleft()]
        size = len(taken[0][1])
        while self._queue and len(taken) < self._max_batch:
            size += len(self._queue[0][1])
            if size > self._max_batch_bytes:
                break
            taken.append(self._queue.popleft())
        return taken

    async def _send(self) -> None:
        try:
            while self._queue:
                taken = self._take()
                try:
                    await self._send_runs(_runs(taken))
                except TamtoError as exc:
                    self._error = self._error or exc
                except Exception as exc:
                    self._error = self._error or InvalidArgument(f"cannot publish: {exc}")
                finally:
                    self._room.set()
        finally:
            self._sender = None

    async def _send_runs(self, runs: list[list[_Queued]]) -> None:
        encoded = [
            (
                run[0][0],
                *encode_arrow([m[1] for m in run], [m[2] for m in run], [m[3] for m in run]),
            )
            for run in runs
        ]
        if self._one_run_per_call:
            for run in encoded:
                await self._call([run])
            return
        response = await self._call(encoded)
        if len(encoded) > 1 and response.count < sum(c for _, _, c in encoded):
            self._one_run_per_call = True  # it published the first run only
            for run in encoded[1:]:
                await self._call([run])

    def _raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    async def flush(self) -> None:
        """Wait until every queued message was sent; raise the first error since the last flush."""
        while self._sender is not None:
            await asyncio.gather(self._sender, return_exceptions=True)
        self._raise_error()

    async def close(self) -> None:
        """Flush, then refuse further publishes. Idempotent."""
        if self._closed:
            return
        try:
            await self.flush()
        finally:
            self._closed = True

    async def __aenter__(self) -> EphemeralProducer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def _runs(messages: list[_Queued]) -> list[list[_Queued]]:
    """`messages` cut into consecutive runs of one topic each, in order."""
    runs: list[list[_Queued]] = []
    for message in messages:
        if runs and runs[-1][0][0] == message[0]:
            runs[-1].append(message)
        else:
            runs.append([message])
    return runs


class Subscription:
    """A consumer of an ephemeral stream (see the module docstring).

    `async with client.subscribe(...) as sub` (or `await sub.start()`) returns once
    the gateway has it in place: from then on it receives what is published.
    Iterating starts it too. `dropped` counts messages lost to a full buffer.

    When its gateway goes away (killed, restarted, the connection lost) the
    subscription subscribes again through the client's address with the
    client's retry backoff (`ClientOptions`: within a second of a gateway
    serving again), until `retry_deadline_s`; then iteration raises the error.
    What was published while it was away, and what its old gateway had buffered
    for it, is lost (at most once). `reconnects` counts the times it did.
    """

    def __init__(
        self, calls: Calls, stream: str, *, match: str | None, group: str, consumer_name: str
    ) -> None:
        self._calls = calls
        self._request = gateway_pb2.SubscribeEphemeralRequest(
            stream=stream,
            group=group,
            consumer_name=consumer_name,
            max_deliveries_per_event=DELIVERIES_PER_EVENT,
        )
        if match is not None:
            self._request.match = match
        self._call: Any = None
        self._pending: list[EphemeralMessage] = []
        #: Deliveries that came in the same event as the one last returned.
        self._queued: collections.deque[Any] = collections.deque()
        self.entity = ""
        self.dropped = 0
        self.reconnects = 0
        self._closed = False

    async def start(self) -> Subscription:
        """Open the subscription; returns once it is live. Raises what the gateway refused."""
        if self._call is not None:
            return self
        if self._closed:
            raise Closed("subscription is closed")
        for attempt in (1, 2):
            metadata = await self._calls.auth.metadata()
            self._call = self._calls.stub.SubscribeEphemeral(self._request, metadata=metadata)
            try:
                first = await self._read()
            except Unauthenticated:
                if attempt == 2:
                    raise
                await self._calls.auth.renew_after_rejection(metadata)
                continue
            if first is None and not self._closed:
                raise Unavailable("the gateway ended the subscription before it started")
            if first is None or first.WhichOneof("event") != "subscribed":
                raise Closed("the subscription ended before it started")
            self.entity = first.subscribed.entity
            return self
        raise AssertionError("unreachable")

    async def _read(self) -> Any:
        try:
            data = await self._call.read()
        except grpc.aio.AioRpcError as exc:
            if self._closed and exc.code() == grpc.StatusCode.CANCELLED:
                return None
            # Reading changes nothing at the gateway: a connection torn down mid-call
            # is a lost connection (Unavailable), safe to subscribe again after.
            raise from_rpc_error(exc, deduplicated=True) from None
        return None if data is grpc.aio.EOF else data

    async def next_batch(self) -> EphemeralBatch | None:
        """The next batch delivered, or None once the subscription was closed."""
        if self._queued:
            return self._batch(self._queued.popleft())
        await self.start()
        while True:
            try:
                event = await self._read()
            except TamtoError as exc:
                if self._closed or not exc.retriable:
                    raise
                await self._resubscribe(exc)
                continue
            if event is None:
                if self._closed:
                    return None
                # Only a gateway shutting down ends a subscription: subscribe again.
                await self._resubscribe(Unavailable("the gateway ended the subscription"))
                continue
            if event.WhichOneof("event") == "delivery":
                self._queued.extend(event.more_deliveries)
                return self._batch(event.delivery)

    def _batch(self, delivery: Any) -> EphemeralBatch:
        batch = EphemeralBatch._from_delivery(delivery)
        self.dropped += batch.dropped
        return batch

    async def _resubscribe(self, error: TamtoError) -> None:
        """Subscribe again after `error` ended the call, with the client's backoff;
        raise the last error once `retry_deadline_s` is spent or one is not retriable."""
        backoff = Backoff(self._calls.options)
        while not self._closed:
            if self._call is not None:
                self._call.cancel()
                self._call = None
            try:
                await self.start()
            except TamtoError as exc:
                if self._closed or not exc.retriable:
                    raise
                error = exc
            else:
                self.reconnects += 1
                return
            delay = backoff.next_delay()
            if delay is None:
                raise error
            await asyncio.sleep(delay)

    async def batches(self) -> AsyncIterator[EphemeralBatch]:
        """Every batch delivered, until the subscription ends."""
        while (batch := await self.next_batch()) is not None:
            yield batch

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> EphemeralMessage:
        while not self._pending:
            batch = await self.next_batch()
            if batch is None:
                raise StopAsyncIteration
            self._pending = list(batch)
            self._pending.reverse()
        return self._pending.pop()

    async def close(self) -> None:
        """Leave: nothing more is delivered to this consumer. Idempotent."""
        self._closed = True
        self._queued.clear()
        if self._call is not None:
            self._call.cancel()

    async def __aenter__(self) -> Subscription:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


#: Request/reply names this module had before they moved to `tamto_sdk.replies`.
_MOVED = ("Handler", "MAX_REQUEST_TIMEOUT_S", "ReplyHandler", "reply", "request", "timeout_ms")


def __getattr__(name: str) -> Any:
    """The request/reply names that moved to `tamto_sdk.replies`, still found here
    (deprecated)."""
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"tamto_sdk.ephemeral.{name} moved to tamto_sdk.replies.{name}",
        DeprecationWarning,
        stacklevel=2,
    )
    # By name, not an import statement: this deprecated alias (kept one release) is the
    # only way back from here to `replies`, which builds on this module.
    return getattr(importlib.import_module("tamto_sdk.replies"), name)
