"""The producer: the public face of publishing to one stream.

`Producer` is what applications use (`send`, `send_batch`, `flush`, `close`, an
async context manager); it checks its input and delegates. The work is split as
aiokafka splits its producer into ``message_accumulator`` and ``sender``:

- `tamto_sdk.accumulator`: messages collected into per-partition batches
  (routing, size and linger limits, backpressure, flush);
- `tamto_sdk.columns`: a batch's messages as Arrow columns and Arrow IPC, built
  vectorised, never per message;
- `tamto_sdk.sender`: one task per partition publishing its due batches, up to
  `max_in_flight` at once, with idempotence ids, their order, retries and
  reconnects.

The hot path is `send`: it appends the message to its partition's open batch
(two list appends for a plain payload) and returns a future; nothing else runs
per message until the batch is published. `send_batch` takes many messages at
once (a list of payloads or an Arrow table) and adds them to the same batches
column-wise, with one future for all of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa

from tamto_sdk import tracing
from tamto_sdk._calls import Calls
from tamto_sdk._lifecycle import AsyncClosing
from tamto_sdk.accumulator import Accumulator
from tamto_sdk.admin import Streams
from tamto_sdk.columns import batch_columns
from tamto_sdk.errors import Closed
from tamto_sdk.messages import PublishedBatch, PublishResult
from tamto_sdk.producer_batch import BatchOutcome
from tamto_sdk.sender import MAX_IN_FLIGHT, Sender

__all__ = ["MAX_BATCH_BYTES", "Producer"]

#: The largest `max_batch_bytes`: every hop accepts requests of up to 64 MiB.
MAX_BATCH_BYTES = 32 << 20


class Producer(AsyncClosing):
    """Publishes messages to one stream in batches.

    Use as an async context manager (``async with client.producer("s") as p``);
    leaving the block flushes and closes it. `send` only enqueues: it returns a
    future that resolves to a `PublishResult` once the broker has the message
    durably, and waits only when `max_pending_messages` are unresolved
    (backpressure). `send_batch` enqueues many messages with one future.

    Keyed messages go to ``partition_for_key(key, partitions)``; keyless messages
    fill one partition's batch and rotate to the next partition between batches.
    Each partition has up to `max_in_flight` batches in flight (1 by default; Kafka's
    idempotent producer allows 5, which here measured slower: docs/benchmarks.md); the
    router stores them in the order they were sent even when one is retried, so order
    per partition holds. A batch without generated
    ids (`idempotent=False`, or every message with an id of the application's)
    goes alone: nothing else of its partition is in flight with it.

    A batch is published when it holds `max_batch_messages` or `max_batch_bytes`
    (at most `MAX_BATCH_BYTES`), or `linger_s` after its first message. With
    `linger_s=0` (the default) it goes as soon as its partition has room for
    another batch in flight: once `max_in_flight` are, batches are clocked by the
    round trip, one message alone when the
    stream is quiet, as many as arrived meanwhile under load; keyless messages
    then stay on one partition until a full batch's worth went there, so that
    partition's batches grow with the rate instead of every partition getting
    one message each.

    With `idempotent` (the default) every message without an id gets
    ``<producer id>:<sequence>`` when its batch is encoded, so a batch retried
    after a lost connection is recognised by the server's dedup window and never
    stored twice.
    """

    def __init__(
        self,
        calls: Calls,
        streams: Streams,
        stream: str,
        *,
        linger_s: float = 0,
        max_batch_messages: int = 1000,
        max_batch_bytes: int = 4 << 20,
        max_pending_messages: int = 100_000,
        producer_name: str | None = None,
        idempotent: bool = True,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        if linger_s < 0:
            raise ValueError("linger_s must not be negative")
        if max_batch_messages <= 0 or max_batch_bytes <= 0 or max_pending_messages <= 0:
            raise ValueError("batch and pending limits must be positive")
        if max_in_flight <= 0:
            raise ValueError("max_in_flight must be positive")
        if max_batch_bytes > MAX_BATCH_BYTES:
            raise ValueError(f"max_batch_bytes must be at most {MAX_BATCH_BYTES} (32 MiB)")
        self._streams = streams
        self._stream = stream
        self._max_pending = max_pending_messages
        self._accumulator = Accumulator(
            stream,
            linger_s=linger_s,
            max_batch_messages=max_batch_messages,
            max_batch_bytes=max_batch_bytes,
            max_pending_messages=max_pending_messages,
            on_partition=self._start_sender,
        )
        self._sender = Sender(
            calls,
            self._accumulator,
            stream,
            producer_name=producer_name,
            idempotent=idempotent,
            max_in_flight=max_in_flight,
        )
        self._started = False
        self._start_lock = asyncio.Lock()
        self._closed = False
        self._close_task: asyncio.Task[None] | None = None

    @property
    def stream(self) -> str:
        """The stream this producer publishes to."""
        return self._stream

    @property
    def pending(self) -> int:
        """Messages enqueued or in flight whose futures have not resolved yet."""
        return self._accumulator.pending

    @property
    def in_flight_batches(self) -> int:
        """Batches sent to the broker and not answered yet (at most `max_in_flight` per
        partition)."""
        return self._sender.in_flight

    async def start(self) -> None:
        """Look up the stream's partition count; `send` calls it when needed."""
        if self._started:
            return
        async with self._start_lock:
            if self._started:
                return
            partitions = await self._streams.partition_count(self._stream)
            self._accumulator.start(partitions, asyncio.get_running_loop())
            self._started = True

    async def _open(self) -> None:
        await self.start()

    async def send(
        self,
        payload: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        id: str | None = None,
        event_time: datetime | None = None,
    ) -> asyncio.Future[PublishResult]:
        """Enqueue one message and return a future for its `PublishResult`.

        Awaiting `send` waits only while `max_pending_messages` are unresolved.
        The future fails with a `TamtoError` if the batch could not be published
        (after retrying retriable failures up to `ClientOptions.retry_deadline_s`).
        """
        if self._closed:
            raise Closed("producer is closed")
        if type(payload) is not bytes:
            payload = _as_bytes(payload, "payload")
        span = None
        if tracing.tracing():
            span = tracing.publish_span(self._stream, 1)
            headers = tracing.with_context(headers, tracing.carrier(span))
        plain = key is None and headers is None and id is None and event_time is None
        if not plain:
            key = _check_extras(key, headers, id)
        if not self._started:
            await self.start()
        accumulator = self._accumulator
        if accumulator.pending >= self._max_pending:
            await accumulator.wait_for_space()
        future = accumulator.add(payload, key, headers, id, event_time, plain)
        if span is not None:
            tracing.end_with(span, future)
        return future

    async def send_batch(
        self,
        messages: pa.Table | pa.RecordBatch | Sequence[bytes] | pa.Array,
        *,
        keys: Sequence[bytes | None] | pa.Array | None = None,
        headers: Sequence[Mapping[str, str] | None] | pa.Array | None = None,
        ids: Sequence[str | None] | pa.Array | None = None,
        event_times: Sequence[datetime | None] | pa.Array | None = None,
        partition: int | None = None,
    ) -> asyncio.Future[PublishedBatch]:
        """Enqueue many messages at once; the future resolves to a `PublishedBatch`
        (every message's partition and offset, in the order given) once all of
        them are durable.

        `messages` is either a pyarrow Table or RecordBatch with a ``payload``
        column and optionally ``key``, ``headers``, ``id`` and ``event_time``
        columns (the columns of `MessageBatch.record_batch`), or the payloads
        alone (a sequence of bytes or a binary array), with the other columns as
        keyword arguments of the same length. Nothing runs per message in Python
        except hashing keys (keyed messages) and converting Python lists.

        The messages join the same batches as `send`'s (routing, batching, order
        per partition and backpressure are the same). If any of them cannot be
        published the future fails with that `TamtoError`; messages of other
        batches may have been stored (ids make a resend safe).

        `partition` sends every message to that partition whatever its key (as a
        Kafka record naming its partition): for a caller whose resends must land
        where the first attempt did, so that the partition's dedup window drops them.
        """
        if self._closed:
            raise Closed("producer is closed")
        span = None
        if tracing.tracing() and _headers_given_as_lists(messages, headers):
            count = len(messages)
            span = tracing.publish_span(self._stream, count)
            headers = tracing.batch_headers(headers, count, tracing.carrier(span))
        columns = batch_columns(messages, keys, headers, ids, event_times)
        n = len(columns[1])
        if not self._started:
            await self.start()
        if partition is not None and not 0 <= partition < self._accumulator.partitions:
            raise ValueError(f"partition {partition} is not one of the stream's")
        future: asyncio.Future[PublishedBatch] = asyncio.get_running_loop().create_future()
        if span is not None:
            tracing.end_with(span, future)
        outcome = BatchOutcome(self._stream, n, future)
        if n == 0:
            return future
        accumulator = self._accumulator
        if accumulator.pending >= self._max_pending:
            await accumulator.wait_for_space()
        accumulator.add_rows(columns, outcome, partition)
        return future

    async def send_and_wait(
        self,
        payload: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        id: str | None = None,
        event_time: datetime | None = None,
    ) -> PublishResult:
        """Send one message and wait until it is durable; raises a `TamtoError` on failure."""
        future = await self.send(payload, key=key, headers=headers, id=id, event_time=event_time)
        return await future

    async def flush(self) -> None:
        """Send everything enqueued so far without lingering and wait for the outcomes.

        Failures stay on the individual futures; `flush` itself does not raise them.
        """
        await self._accumulator.flush()

    async def close(self) -> None:
        """Flush pending messages, then stop the sender tasks. Idempotent."""
        if self._close_task is None:
            self._close_task = asyncio.ensure_future(self._close())
        await asyncio.shield(self._close_task)

    async def _close(self) -> None:
        self._closed = True
        self._accumulator.close()
        try:
            await self._accumulator.flush()
        finally:
            await self._sender.close()

    def _start_sender(self, partition: int) -> None:
        self._sender.start(partition)


def _headers_given_as_lists(messages: Any, headers: Any) -> bool:
    """Whether trace context can be added to a batch's headers: they are not in a
    table's column or an Arrow array (those are the caller's, sent as they are)."""
    table = isinstance(messages, pa.Table | pa.RecordBatch)
    return not table and (headers is None or isinstance(headers, Sequence))


def _as_bytes(value: Any, what: str) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise TypeError(f"{what} must be bytes, not {type(value).__name__}")
    return bytes(value)


def _check_extras(key: Any, headers: Mapping[str, str] | None, id: str | None) -> bytes | None:
    if key is not None and type(key) is not bytes:
        if not isinstance(key, bytes | bytearray | memoryview):
            raise TypeError(f"key must be bytes or None, not {type(key).__name__}")
        key = bytes(key)
    if headers is not None:
        for name, value in headers.items():
            if not isinstance(name, str) or not isinstance(value, str):
                raise TypeError("headers must map str to str")
    if id is not None and not isinstance(id, str):
        raise TypeError("id must be a str or None")
    return key  # type: ignore[no-any-return]
