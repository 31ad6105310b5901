"""The producer: accumulates messages per partition and publishes whole Arrow batches."""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any

from tamto_protocol.batch import BatchColumns, encode_batch
from tamto_protocol.partitioning import partition_for_key
from tamto_protocol.v1 import gateway_pb2, messages_pb2
from tamto_sdk._calls import Calls
from tamto_sdk.admin import Streams
from tamto_sdk.errors import Closed, Internal, InvalidArgument, TamtoError
from tamto_sdk.messages import PublishResult, datetime_to_us

__all__ = ["Producer"]

# Rough per-message overhead of the Arrow encoding (offsets, validity bits).
_MESSAGE_OVERHEAD = 32


@dataclass(slots=True)
class _Pending:
    payload: bytes
    key: bytes | None
    headers: Mapping[str, str] | None
    id: str | None
    event_time_us: int | None
    size: int
    future: asyncio.Future[PublishResult]


class _PartitionBuffer:
    """Messages accumulated for one partition, and the wake-up of its sender task."""

    def __init__(self) -> None:
        self.messages: deque[_Pending] = deque()
        self.bytes = 0
        self.first_at = 0.0
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None


class Producer:
    """Publishes messages to one stream in batches.

    Use as an async context manager (``async with client.producer("s") as p``);
    leaving the block flushes and closes it. `send` only enqueues: it returns a
    future that resolves to a `PublishResult` once the broker has the message
    durably, and waits only when `max_pending_messages` are unresolved
    (backpressure).

    Keyed messages go to ``partition_for_key(key, partitions)``; keyless messages
    fill one partition's batch and rotate to the next partition between batches.
    Each partition has at most one batch in flight, so order per partition holds.
    """

    def __init__(
        self,
        calls: Calls,
        streams: Streams,
        stream: str,
        *,
        linger_ms: float = 5,
        max_batch_messages: int = 1000,
        max_batch_bytes: int = 1 << 20,
        max_pending_messages: int = 100_000,
        producer_name: str | None = None,
        idempotent: bool = True,
    ) -> None:
        if linger_ms < 0:
            raise ValueError("linger_ms must not be negative")
        if max_batch_messages <= 0 or max_batch_bytes <= 0 or max_pending_messages <= 0:
            raise ValueError("batch and pending limits must be positive")
        self._calls = calls
        self._streams = streams
        self._stream = stream
        self._linger_s = linger_ms / 1000
        self._max_batch_messages = max_batch_messages
        self._max_batch_bytes = max_batch_bytes
        self._max_pending = max_pending_messages
        self._producer_name = producer_name
        # Idempotence: every message without an id gets `<producer id>:<sequence>`, so
        # a batch retried after a lost connection is recognised by the server's dedup
        # window and never stored twice.
        self._idempotent = idempotent
        self._producer_id = f"{producer_name or 'p'}-{uuid.uuid4().hex[:12]}"
        self._sequence = 0
        self._partitions = 0
        self._sticky = 0
        self._sticky_messages = 0
        self._sticky_bytes = 0
        self._buffers: dict[int, _PartitionBuffer] = {}
        self._pending = 0
        self._unresolved: set[asyncio.Future[PublishResult]] = set()
        self._space = asyncio.Event()
        self._space.set()
        self._flushing = 0
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
        return self._pending

    async def start(self) -> None:
        """Look up the stream's partition count; `send` calls it when needed."""
        if self._started:
            return
        async with self._start_lock:
            if self._started:
                return
            self._partitions = await self._streams.partition_count(self._stream)
            self._sticky = random.randrange(self._partitions)
            self._started = True

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

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
        payload, key = _check_message(payload, key, headers, id)
        await self.start()
        while self._pending >= self._max_pending:
            self._space.clear()
            await self._space.wait()
            if self._closed:
                raise Closed("producer is closed")
        if id is None and self._idempotent:
            id = f"{self._producer_id}:{self._sequence}"
            self._sequence += 1
        partition = partition_for_key(key, self._partitions) if key is not None else self._sticky
        size = len(payload) + (len(key) if key else 0) + _MESSAGE_OVERHEAD
        if headers:
            size += sum(len(k) + len(v) for k, v in headers.items())
        loop = asyncio.get_running_loop()
        future: asyncio.Future[PublishResult] = loop.create_future()
        pending = _Pending(
            payload=payload,
            key=key,
            headers=headers,
            id=id,
            event_time_us=datetime_to_us(event_time) if event_time is not None else None,
            size=size,
            future=future,
        )
        buffer = self._buffer(partition)
        if not buffer.messages:
            buffer.first_at = loop.time()
        buffer.messages.append(pending)
        buffer.bytes += size
        self._pending += 1
        self._unresolved.add(future)
        future.add_done_callback(self._unresolved.discard)
        if key is None:
            self._sticky_messages += 1
            self._sticky_bytes += size
            if (
                self._sticky_messages >= self._max_batch_messages
                or self._sticky_bytes >= self._max_batch_bytes
            ):
                self._rotate_sticky()
        buffer.wake.set()
        return future

    def _rotate_sticky(self) -> None:
        """Move keyless messages to the next partition (the current batch is closed)."""
        self._sticky = (self._sticky + 1) % self._partitions
        self._sticky_messages = 0
        self._sticky_bytes = 0

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
        waiting = list(self._unresolved)
        if not waiting:
            return
        self._flushing += 1
        try:
            for buffer in self._buffers.values():
                buffer.wake.set()
            await asyncio.wait(waiting)
        finally:
            self._flushing -= 1

    async def close(self) -> None:
        """Flush pending messages, then stop the sender tasks. Idempotent."""
        if self._close_task is None:
            self._close_task = asyncio.ensure_future(self._close())
        await asyncio.shield(self._close_task)

    async def _close(self) -> None:
        self._closed = True
        self._space.set()
        try:
            await self.flush()
        finally:
            tasks = [b.task for b in self._buffers.values() if b.task is not None]
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def _buffer(self, partition: int) -> _PartitionBuffer:
        buffer = self._buffers.get(partition)
        if buffer is None:
            buffer = _PartitionBuffer()
            buffer.task = asyncio.get_running_loop().create_task(
                self._run_partition(partition, buffer),
                name=f"tamto-producer-{self._stream}-{partition}",
            )
            self._buffers[partition] = buffer
        return buffer

    def _is_full(self, buffer: _PartitionBuffer) -> bool:
        return (
            len(buffer.messages) >= self._max_batch_messages
            or buffer.bytes >= self._max_batch_bytes
        )

    async def _run_partition(self, partition: int, buffer: _PartitionBuffer) -> None:
        """The sender of one partition: linger, take a batch, publish it, repeat."""
        loop = asyncio.get_running_loop()
        batch: list[_Pending] = []
        try:
            while True:
                if not buffer.messages:
                    buffer.wake.clear()
                    await buffer.wake.wait()
                    continue
                if not self._flushing and not self._closed and not self._is_full(buffer):
                    remaining = buffer.first_at + self._linger_s - loop.time()
                    if remaining > 0:
                        buffer.wake.clear()
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(buffer.wake.wait(), remaining)
                        continue
                batch = self._take(partition, buffer)
                await self._publish(partition, batch)
                batch = []
        except asyncio.CancelledError:
            error = Closed("producer closed before the message was published")
            _fail(batch, error)
            _fail(list(buffer.messages), error)
            buffer.messages.clear()
            raise

    def _take(self, partition: int, buffer: _PartitionBuffer) -> list[_Pending]:
        batch: list[_Pending] = []
        size = 0
        while buffer.messages and len(batch) < self._max_batch_messages:
            item = buffer.messages[0]
            if batch and size + item.size > self._max_batch_bytes:
                break
            buffer.messages.popleft()
            batch.append(item)
            size += item.size
        buffer.bytes -= size
        if partition == self._sticky and self._sticky_messages:
            self._rotate_sticky()
        return batch

    async def _publish(self, partition: int, batch: list[_Pending]) -> None:
        try:
            try:
                arrow_ipc = encode_batch(
                    BatchColumns(
                        payloads=[m.payload for m in batch],
                        keys=[m.key for m in batch],
                        headers=[m.headers for m in batch],
                        ids=[m.id for m in batch],
                        event_times_us=[m.event_time_us for m in batch],
                        producer=self._producer_name,
                    )
                )
            except Exception as exc:
                raise InvalidArgument(f"cannot encode batch: {exc}") from exc
            request = gateway_pb2.PublishRequest(
                stream=self._stream,
                partition=partition,
                batch=messages_pb2.RecordBatch(arrow_ipc=arrow_ipc, count=len(batch)),
            )
            response: Any = await self._calls.unary(self._calls.stub.Publish, request)
            if int(response.count) not in (0, len(batch)):
                raise Internal(f"published {len(batch)} messages but {response.count} acked")
            base = int(response.base_offset)
            acked_partition = int(response.partition)
            # Set when the server recognised duplicates: every message's own offset.
            offsets = list(response.offsets) or [base + i for i in range(len(batch))]
            if len(offsets) != len(batch):
                raise Internal(f"published {len(batch)} messages but got {len(offsets)} offsets")
            for item, offset in zip(batch, offsets, strict=True):
                if not item.future.done():
                    item.future.set_result(PublishResult(self._stream, acked_partition, offset))
        except TamtoError as exc:
            _fail(batch, exc)
        except Exception as exc:  # a bug must not leave futures hanging
            _fail(batch, Internal(f"unexpected error while publishing: {exc!r}"))
        finally:
            self._pending -= len(batch)
            if self._pending < self._max_pending:
                self._space.set()


def _fail(batch: list[_Pending], error: TamtoError) -> None:
    for item in batch:
        if not item.future.done():
            item.future.set_exception(error)


def _check_message(
    payload: Any, key: Any, headers: Mapping[str, str] | None, id: str | None
) -> tuple[bytes, bytes | None]:
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
    if key is not None and not isinstance(key, bytes | bytearray | memoryview):
        raise TypeError(f"key must be bytes or None, not {type(key).__name__}")
    if headers is not None:
        for name, value in headers.items():
            if not isinstance(name, str) or not isinstance(value, str):
                raise TypeError("headers must map str to str")
    if id is not None and not isinstance(id, str):
        raise TypeError("id must be a str or None")
    return bytes(payload), bytes(key) if key is not None else None
