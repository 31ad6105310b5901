"""The producer: accumulates messages per partition and publishes whole Arrow batches.

The hot path is `send`: it appends the message to its partition's open batch
(two list appends for a plain payload) and returns a future; nothing else runs
per message until the batch is published. A batch becomes its Arrow columns in
one go (idempotence ids included, built vectorised), and its outcome resolves
the futures in one loop. `send_batch` takes many messages at once (a list of
payloads or an Arrow table) and adds them to the same batches column-wise, with
one future for all of them.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import itertools
import random
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tamto_protocol.batch import (
    EVENT_TIME_TYPE,
    HEADERS_TYPE,
    ID_TYPE,
    KEY_TYPE,
    PAYLOAD_TYPE,
    int64_array,
    int64_scalar,
    int_values,
    ipc_buffer,
    make_batch,
    sequence_ids,
)
from tamto_protocol.partitioning import partition_for_key
from tamto_protocol.wire import publish_request
from tamto_sdk._calls import Calls
from tamto_sdk.admin import Streams
from tamto_sdk.errors import Closed, Internal, InvalidArgument, TamtoError
from tamto_sdk.messages import PublishedBatch, PublishResult, datetime_to_us

__all__ = ["MAX_BATCH_BYTES", "Producer"]

# Rough per-message overhead of the Arrow encoding (offsets, validity bits, the id).
_MESSAGE_OVERHEAD = 32
#: The headers column as a list of (name, value) structs.
_HEADER_PAIRS = pa.list_(pa.struct([HEADERS_TYPE.key_field, HEADERS_TYPE.item_field]))

#: The largest `max_batch_bytes`: every hop accepts requests of up to 64 MiB.
MAX_BATCH_BYTES = 32 << 20

# `PublishResult` is a frozen dataclass with slots; its generated __init__ sets each
# field through object.__setattr__, which costs three times what setting the slots
# directly does. Results are built once per message, so they are built this way.
_new_result = object.__new__
_set_stream = PublishResult.__dict__["stream"].__set__
_set_partition = PublishResult.__dict__["partition"].__set__
_set_offset = PublishResult.__dict__["offset"].__set__


class _Extras:
    """The optional columns of a batch's single messages, once one of them has any."""

    __slots__ = ("event_times", "headers", "ids", "keys")

    def __init__(self, count: int) -> None:
        self.keys: list[bytes | None] = [None] * count
        self.headers: list[Mapping[str, str] | None] = [None] * count
        self.ids: list[str | None] = [None] * count
        self.event_times: list[int | None] = [None] * count


class _Singles:
    """Messages given one by one to `send`, each with its own future."""

    __slots__ = ("extras", "futures", "payloads")

    def __init__(self) -> None:
        self.payloads: list[bytes] = []
        self.futures: list[asyncio.Future[PublishResult]] = []
        self.extras: _Extras | None = None

    def columns(self) -> tuple[pa.Array, ...]:
        """key, payload, headers, id, event_time."""
        n = len(self.payloads)
        payloads = _binary_array(self.payloads)
        extras = self.extras
        if extras is None:
            return (
                pa.nulls(n, KEY_TYPE),
                payloads,
                pa.nulls(n, HEADERS_TYPE),
                pa.nulls(n, ID_TYPE),
                pa.nulls(n, EVENT_TIME_TYPE),
            )
        return (
            pa.array(extras.keys, KEY_TYPE),
            payloads,
            pa.array([list(h.items()) if h else None for h in extras.headers], HEADERS_TYPE),
            pa.array(extras.ids, ID_TYPE),
            pa.array(extras.event_times, pa.int64()).cast(EVENT_TIME_TYPE),
        )

    def resolve(self, stream: str, partition: int, offsets: Sequence[int]) -> None:
        for future, offset in zip(self.futures, offsets, strict=True):
            if not future.done():
                result = _new_result(PublishResult)
                _set_stream(result, stream)
                _set_partition(result, partition)
                _set_offset(result, offset)
                future.set_result(result)

    def fail(self, error: TamtoError) -> None:
        for future in self.futures:
            if not future.done():
                future.set_exception(error)


class _BatchOutcome:
    """The one future of a `send_batch` call, filled in as its rows are published."""

    __slots__ = ("future", "offsets", "partitions", "remaining", "stream")

    def __init__(self, stream: str, count: int, future: asyncio.Future[PublishedBatch]) -> None:
        self.stream = stream
        self.future = future
        self.remaining = count
        self.partitions = array.array("i", bytes(4 * count))
        self.offsets = array.array("q", bytes(8 * count))

    def fill(self, rows: range | list[int], partition: int, offsets: Sequence[int]) -> None:
        if isinstance(rows, range):
            self.partitions[rows.start : rows.stop] = array.array("i", [partition]) * len(rows)
            self.offsets[rows.start : rows.stop] = (
                array.array("q", offsets) if not isinstance(offsets, array.array) else offsets
            )
        else:
            for row, offset in zip(rows, offsets, strict=True):
                self.partitions[row] = partition
                self.offsets[row] = offset
        self.remaining -= len(rows)
        if self.remaining == 0 and not self.future.done():
            self.future.set_result(
                PublishedBatch(
                    self.stream,
                    _int_array(self.partitions, pa.int32()),
                    _int_array(self.offsets, pa.int64()),
                )
            )

    def fail(self, error: TamtoError) -> None:
        if not self.future.done():
            self.future.set_exception(error)


class _Rows:
    """Rows of one `send_batch` call: their columns and where they sit in the call."""

    __slots__ = ("arrays", "outcome", "rows")

    def __init__(
        self, arrays: tuple[pa.Array, ...], outcome: _BatchOutcome, rows: range | list[int]
    ) -> None:
        self.arrays = arrays
        self.outcome = outcome
        self.rows = rows

    def columns(self) -> tuple[pa.Array, ...]:
        """key, payload, headers, id, event_time."""
        return self.arrays

    def resolve(self, stream: str, partition: int, offsets: Sequence[int]) -> None:
        self.outcome.fill(self.rows, partition, offsets)

    def fail(self, error: TamtoError) -> None:
        self.outcome.fail(error)


class _Batch:
    """One batch for one partition: what one Publish RPC carries.

    Single messages go into `singles` (the open run); rows from `send_batch` close
    that run and follow it as a `_Rows` part, so the order of calls is kept.
    """

    __slots__ = ("bytes", "count", "done", "first_at", "parts", "singles")

    def __init__(self, now: float, done: asyncio.Future[None]) -> None:
        self.singles = _Singles()
        self.parts: list[_Singles | _Rows] = []
        self.count = 0
        self.bytes = 0
        self.first_at = now
        self.done = done

    def add_rows(self, part: _Rows, count: int, size: int) -> None:
        if self.singles.payloads:
            self.parts.append(self.singles)
            self.singles = _Singles()
        self.parts.append(part)
        self.count += count
        self.bytes += size

    def all_parts(self) -> list[_Singles | _Rows]:
        return [*self.parts, self.singles] if self.singles.payloads else self.parts

    def columns(self) -> tuple[pa.Array, ...]:
        """key, payload, headers, id, event_time of every message, in order."""
        parts = [p.columns() for p in self.all_parts()]
        if len(parts) == 1:
            return parts[0]
        return tuple(pa.concat_arrays([part[i] for part in parts]) for i in range(5))

    def resolve(self, stream: str, partition: int, offsets: Sequence[int]) -> None:
        start = 0
        for part in self.all_parts():
            n = len(part.rows) if isinstance(part, _Rows) else len(part.payloads)
            part.resolve(stream, partition, offsets[start : start + n])
            start += n

    def fail(self, error: TamtoError) -> None:
        for part in self.all_parts():
            part.fail(error)


class Producer:
    """Publishes messages to one stream in batches.

    Use as an async context manager (``async with client.producer("s") as p``);
    leaving the block flushes and closes it. `send` only enqueues: it returns a
    future that resolves to a `PublishResult` once the broker has the message
    durably, and waits only when `max_pending_messages` are unresolved
    (backpressure). `send_batch` enqueues many messages with one future.

    Keyed messages go to ``partition_for_key(key, partitions)``; keyless messages
    fill one partition's batch and rotate to the next partition between batches.
    Each partition has at most one batch in flight, so order per partition holds.

    A batch is published when it holds `max_batch_messages` or `max_batch_bytes`
    (at most `MAX_BATCH_BYTES`), or `linger_ms` after its first message. With
    `linger_ms=0` (the default) it goes as soon as its partition has no batch in
    flight: batches are clocked by the round trip, one message alone when the
    stream is quiet, as many as arrived meanwhile under load; keyless messages
    then stay on one partition until a full batch's worth went there, so that
    partition's batches grow with the rate instead of every partition getting
    one message each.
    """

    def __init__(
        self,
        calls: Calls,
        streams: Streams,
        stream: str,
        *,
        linger_ms: float = 0,
        max_batch_messages: int = 1000,
        max_batch_bytes: int = 4 << 20,
        max_pending_messages: int = 100_000,
        producer_name: str | None = None,
        idempotent: bool = True,
    ) -> None:
        if linger_ms < 0:
            raise ValueError("linger_ms must not be negative")
        if max_batch_messages <= 0 or max_batch_bytes <= 0 or max_pending_messages <= 0:
            raise ValueError("batch and pending limits must be positive")
        if max_batch_bytes > MAX_BATCH_BYTES:
            raise ValueError(f"max_batch_bytes must be at most {MAX_BATCH_BYTES} (32 MiB)")
        self._calls = calls
        self._streams = streams
        self._stream = stream
        self._linger_s = linger_ms / 1000
        self._max_batch_messages = max_batch_messages
        self._max_batch_bytes = max_batch_bytes
        self._max_pending = max_pending_messages
        self._producer_name = producer_name
        # Idempotence: every message without an id gets `<producer id>:<sequence>`
        # (assigned when its batch is encoded, so a retry resends the same ids), so
        # a batch retried after a lost connection is recognised by the server's dedup
        # window and never stored twice.
        self._idempotent = idempotent
        self._producer_id = f"{producer_name or 'p'}-{uuid.uuid4().hex[:12]}"
        self._sequence = 0
        self._partitions = 0
        self._sticky = 0
        self._sticky_taken = 0  # messages sent to the sticky partition since it was chosen
        # Per partition: batches waiting (the last one may be open), the open one,
        # the wake-up of its sender task and the task.
        self._queues: dict[int, deque[_Batch]] = {}
        self._open: dict[int, _Batch] = {}
        self._wakes: dict[int, asyncio.Event] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._unfinished: set[_Batch] = set()
        self._pending = 0
        self._space = asyncio.Event()
        self._space.set()
        self._flushing = 0
        self._started = False
        self._start_lock = asyncio.Lock()
        self._closed = False
        self._close_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

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
            self._loop = asyncio.get_running_loop()
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
        if type(payload) is not bytes:
            payload = _as_bytes(payload, "payload")
        plain = key is None and headers is None and id is None and event_time is None
        if not plain:
            key = _check_extras(key, headers, id)
        if not self._started:
            await self.start()
        if self._pending >= self._max_pending:
            await self._wait_for_space()
        size = len(payload) + _MESSAGE_OVERHEAD
        if plain:
            partition = self._sticky
        else:
            if key is not None:
                size += len(key)
            if headers:
                size += sum(len(k) + len(v) for k, v in headers.items())
            partition = self._sticky if key is None else partition_for_key(key, self._partitions)
        batch = self._open.get(partition)
        if batch is None or (batch.bytes + size > self._max_batch_bytes and batch.count):
            if batch is not None:
                self._close_open(partition)
                if key is None:
                    self._rotate_sticky()
                    partition = self._sticky
                    batch = self._open.get(partition)
            if batch is None or (batch.bytes + size > self._max_batch_bytes and batch.count):
                batch = self._new_batch(partition)
        future: asyncio.Future[PublishResult] = self._loop.create_future()  # type: ignore[union-attr]
        singles = batch.singles
        if plain and singles.extras is None:
            singles.payloads.append(payload)
            singles.futures.append(future)
        else:
            _add_single(singles, payload, future, key, headers, id, event_time)
        batch.count += 1
        batch.bytes += size
        self._pending += 1
        if batch.count >= self._max_batch_messages or batch.bytes >= self._max_batch_bytes:
            self._close_open(partition)
            if key is None:
                self._rotate_sticky()
        return future

    async def send_batch(
        self,
        messages: pa.Table | pa.RecordBatch | Sequence[bytes] | pa.Array,
        *,
        keys: Sequence[bytes | None] | pa.Array | None = None,
        headers: Sequence[Mapping[str, str] | None] | pa.Array | None = None,
        ids: Sequence[str | None] | pa.Array | None = None,
        event_times: Sequence[datetime | None] | pa.Array | None = None,
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
        """
        if self._closed:
            raise Closed("producer is closed")
        columns = _batch_columns(messages, keys, headers, ids, event_times)
        n = len(columns[1])
        if not self._started:
            await self.start()
        loop: asyncio.AbstractEventLoop = self._loop  # type: ignore[assignment]
        future: asyncio.Future[PublishedBatch] = loop.create_future()
        outcome = _BatchOutcome(self._stream, n, future)
        if n == 0:
            outcome.fill(range(0), 0, ())
            return future
        if self._pending >= self._max_pending:
            await self._wait_for_space()
        sizes = _row_sizes(columns)
        key_column = columns[0]
        if key_column.null_count == n:
            self._add_rows(None, columns, range(n), sizes, outcome)
        else:
            groups: dict[int | None, list[int]] = {}
            for row, key in enumerate(key_column.to_pylist()):
                group = None if key is None else partition_for_key(key, self._partitions)
                groups.setdefault(group, []).append(row)
            for partition, rows in groups.items():
                taken = pa.array(rows, pa.int64())
                group_columns = tuple(c.take(taken) for c in columns)
                self._add_rows(partition, group_columns, rows, sizes.take(taken), outcome)
        self._pending += n
        return future

    def _add_rows(
        self,
        partition: int | None,
        columns: tuple[pa.Array, ...],
        rows: range | list[int],
        sizes: pa.Array,
        outcome: _BatchOutcome,
    ) -> None:
        """Add rows bound for `partition` (None: keyless) to batches, splitting at the caps."""
        cumulative = int_values(pc.cumulative_sum(sizes))
        n = len(cumulative)
        start = 0
        while start < n:
            target = self._sticky if partition is None else partition
            batch = self._open.get(target)
            if batch is None:
                batch = self._new_batch(target)
            before = int(cumulative[start - 1]) if start else 0
            room = self._max_batch_bytes - batch.bytes
            end = max(start, int(np.searchsorted(cumulative, before + room, side="right")))
            end = min(end, start + self._max_batch_messages - batch.count, n)
            if end <= start:
                if batch.count:  # the next row does not fit: close this batch and go on
                    self._close_open(target)
                    if partition is None:
                        self._rotate_sticky()
                    continue
                end = start + 1  # one row larger than a whole batch still goes, alone
            part_columns = tuple(c.slice(start, end - start) for c in columns)
            part_rows = rows[start:end]
            batch.add_rows(
                _Rows(part_columns, outcome, part_rows),
                end - start,
                int(cumulative[end - 1]) - before,
            )
            start = end
            if batch.count >= self._max_batch_messages or batch.bytes >= self._max_batch_bytes:
                self._close_open(target)
                if partition is None:
                    self._rotate_sticky()

    async def _wait_for_space(self) -> None:
        while self._pending >= self._max_pending:
            self._space.clear()
            await self._space.wait()
            if self._closed:
                raise Closed("producer is closed")

    def _rotate_sticky(self) -> None:
        """Move keyless messages to the next partition (the current batch is closed)."""
        self._sticky = (self._sticky + 1) % self._partitions
        self._sticky_taken = 0

    def _new_batch(self, partition: int) -> _Batch:
        """Open a new batch for `partition` (closing the open one), and start its sender."""
        loop: asyncio.AbstractEventLoop = self._loop  # type: ignore[assignment]
        batch = _Batch(loop.time(), loop.create_future())
        queue = self._queues.get(partition)
        if queue is None:
            queue = self._queues[partition] = deque()
            self._wakes[partition] = asyncio.Event()
            self._tasks[partition] = loop.create_task(
                self._run_partition(partition, queue, self._wakes[partition]),
                name=f"tamto-producer-{self._stream}-{partition}",
            )
        queue.append(batch)
        self._open[partition] = batch
        self._unfinished.add(batch)
        self._wakes[partition].set()
        return batch

    def _close_open(self, partition: int) -> None:
        """No more messages join `partition`'s open batch: it goes without lingering."""
        if self._open.pop(partition, None) is not None:
            self._wakes[partition].set()

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
        waiting = [batch.done for batch in self._unfinished]
        if not waiting:
            return
        self._flushing += 1
        try:
            for wake in self._wakes.values():
                wake.set()
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
            tasks = list(self._tasks.values())
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _run_partition(
        self, partition: int, queue: deque[_Batch], wake: asyncio.Event
    ) -> None:
        """The sender of one partition: linger, take a batch, publish it, repeat."""
        loop = asyncio.get_running_loop()
        batch: _Batch | None = None
        try:
            while True:
                if not queue:
                    wake.clear()
                    await wake.wait()
                    continue
                batch = queue[0]
                if self._open.get(partition) is batch:
                    if not self._flushing and not self._closed:
                        remaining = batch.first_at + self._linger_s - loop.time()
                        if remaining > 0:
                            wake.clear()
                            with contextlib.suppress(TimeoutError):
                                await asyncio.wait_for(wake.wait(), remaining)
                            batch = None
                            continue
                    del self._open[partition]
                    if partition == self._sticky:
                        self._sticky_taken += batch.count
                        # Without linger, batches are clocked by the one in flight:
                        # keyless messages stay on one partition (so its batches grow
                        # with the rate) until a full batch's worth went there.
                        if self._linger_s or self._sticky_taken >= self._max_batch_messages:
                            self._rotate_sticky()
                queue.popleft()
                await self._publish(partition, batch)
                batch = None
        except asyncio.CancelledError:
            error = Closed("producer closed before the message was published")
            for failed in [*([batch] if batch is not None else []), *queue]:
                self._finish(failed, error)
            queue.clear()
            self._open.pop(partition, None)
            raise

    def _encode(self, batch: _Batch) -> tuple[pa.Buffer, bool]:
        """The batch in Arrow IPC form, and whether every message has an id (so the
        server deduplicates a resend of it)."""
        key, payload, headers, ids, event_time = batch.columns()
        if self._idempotent:
            missing = ids.null_count
            if missing:
                generated = sequence_ids(self._producer_id, self._sequence, missing)
                self._sequence += missing
                ids = (
                    generated
                    if missing == len(ids)
                    else pc.replace_with_mask(ids, pc.is_null(ids), generated)
                )
        encoded = ipc_buffer(
            make_batch(
                payload,
                keys=key,
                headers=headers,
                ids=ids,
                event_times=event_time,
                producer=self._producer_name,
            )
        )
        return encoded, ids.null_count == 0

    async def _publish(self, partition: int, batch: _Batch) -> None:
        error: TamtoError | None = None
        try:
            try:
                arrow_ipc, deduplicated = self._encode(batch)
            except Exception as exc:
                raise InvalidArgument(f"cannot encode batch: {exc}") from exc
            count = batch.count
            stream = self._stream

            def request(call_id: int) -> bytes:
                # In wire form: the Arrow bytes are copied once, not three times.
                return publish_request(stream, partition, arrow_ipc, count, call_id)

            # With ids on every message, a send cut off mid-call is retried too: the
            # server's dedup window recognises it if the first one was stored.
            response: Any = await self._calls.unary(
                self._calls.publish_raw, request, deduplicated=deduplicated
            )
            if int(response.count) not in (0, count):
                raise Internal(f"published {count} messages but {response.count} acked")
            base = int(response.base_offset)
            # Set when the server recognised duplicates: every message's own offset.
            offsets: Sequence[int] = list(response.offsets) or range(base, base + count)
            if len(offsets) != count:
                raise Internal(f"published {count} messages but got {len(offsets)} offsets")
            batch.resolve(self._stream, int(response.partition), offsets)
        except TamtoError as exc:
            error = exc
        except Exception as exc:  # a bug must not leave futures hanging
            error = Internal(f"unexpected error while publishing: {exc!r}")
        self._finish(batch, error)

    def _finish(self, batch: _Batch, error: TamtoError | None) -> None:
        if error is not None:
            batch.fail(error)
        if batch in self._unfinished:
            self._unfinished.discard(batch)
            self._pending -= batch.count
            if self._pending < self._max_pending:
                self._space.set()
        if not batch.done.done():
            batch.done.set_result(None)


def _add_single(
    singles: _Singles,
    payload: bytes,
    future: asyncio.Future[PublishResult],
    key: bytes | None,
    headers: Mapping[str, str] | None,
    id: str | None,
    event_time: datetime | None,
) -> None:
    """Append a message with optional fields (the columns are materialised on first use)."""
    extras = singles.extras
    if extras is None:
        extras = singles.extras = _Extras(len(singles.payloads))
    singles.payloads.append(payload)
    singles.futures.append(future)
    extras.keys.append(key)
    extras.headers.append(headers)
    extras.ids.append(id)
    extras.event_times.append(datetime_to_us(event_time) if event_time is not None else None)


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


_COLUMNS = ("key", "payload", "headers", "id", "event_time")
_TYPES = (KEY_TYPE, PAYLOAD_TYPE, HEADERS_TYPE, ID_TYPE, EVENT_TIME_TYPE)


def _batch_columns(
    messages: Any, keys: Any, headers: Any, ids: Any, event_times: Any
) -> tuple[pa.Array, ...]:
    """key, payload, headers, id, event_time arrays (of the batch schema's types)."""
    given: list[Any]
    if isinstance(messages, pa.Table | pa.RecordBatch):
        if any(c is not None for c in (keys, headers, ids, event_times)):
            raise TypeError("with a table, give keys, headers, ids and event times as its columns")
        if "payload" not in messages.schema.names:
            raise ValueError("the table has no payload column")
        given = [
            messages.column(name) if name in messages.schema.names else None for name in _COLUMNS
        ]
    else:
        if isinstance(messages, str | bytes):
            raise TypeError("messages must be a table or a sequence of payloads, not one payload")
        given = [keys, messages, headers, ids, event_times]
        if isinstance(headers, Sequence) and not isinstance(headers, pa.Array):
            given[2] = [list(h.items()) if h else None for h in headers]
        if isinstance(event_times, Sequence) and not isinstance(event_times, pa.Array):
            given[4] = pa.array(
                [datetime_to_us(t) if t is not None else None for t in event_times], pa.int64()
            )
    n = len(given[1])
    columns: list[pa.Array] = []
    for name, value, type_ in zip(_COLUMNS, given, _TYPES, strict=True):
        if value is None:
            columns.append(pa.nulls(n, type_))
            continue
        try:
            if isinstance(value, pa.ChunkedArray):
                value = value.combine_chunks()
            if isinstance(value, pa.Array):
                array_ = value
            elif type_ == pa.binary():
                # Inferred, not converted: pyarrow would turn a str into its UTF-8 bytes.
                array_ = pa.array(value)
                if not (pa.types.is_binary(array_.type) or pa.types.is_null(array_.type)):
                    raise TypeError(f"{name} values must be bytes, not {array_.type}")
            else:
                array_ = pa.array(value, type_)
            if array_.type != type_:
                if name == "event_time" and pa.types.is_integer(array_.type):
                    array_ = array_.cast(pa.int64())  # microseconds since the epoch
                array_ = array_.cast(type_)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise TypeError(f"{name} column: {exc}") from None
        if len(array_) != n:
            raise ValueError(f"{name} has {len(array_)} entries for {n} payloads")
        columns.append(array_)
    if columns[1].null_count:
        raise ValueError("payloads must not be null")
    return tuple(columns)


def _row_sizes(columns: tuple[pa.Array, ...]) -> pa.Array:
    """Each row's share of a batch's bytes, as `send` counts them."""
    # Scalars built from bytes: converting Python ints would make pyarrow import pandas.
    sizes = pc.add(pc.binary_length(columns[1]).cast(pa.int64()), int64_scalar(_MESSAGE_OVERHEAD))
    if columns[0].null_count != len(columns[0]):
        key_sizes = pc.fill_null(pc.binary_length(columns[0]).cast(pa.int64()), int64_scalar(0))
        sizes = pc.add(sizes, key_sizes)
    headers = columns[2]
    if headers.null_count != len(headers):
        # Bytes of every header name and value, summed per row without a Python loop.
        pairs = headers.cast(_HEADER_PAIRS)  # list kernels take lists, not maps
        entries = pc.list_flatten(pairs)
        entry_bytes = pc.add(
            pc.binary_length(entries.field(0)).cast(pa.int64()),
            pc.binary_length(entries.field(1)).cast(pa.int64()),
        )
        rows = int_values(pc.list_parent_indices(pairs))
        per_row = np.bincount(rows, weights=int_values(entry_bytes), minlength=len(headers))
        sizes = pc.add(sizes, int64_array(per_row.astype(np.int64)))
    return sizes


def _binary_array(values: list[bytes]) -> pa.Array:
    """A binary array of `values`, built from one joined buffer.

    Faster than ``pa.array`` for large values, and it converts no Python objects:
    pyarrow imports pandas before its first such conversion (about two seconds),
    which a producer that only sends payloads never pays.
    """
    offsets = array.array("i", [0])
    offsets.extend(itertools.accumulate(map(len, values)))
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(values))]
    return pa.Array.from_buffers(PAYLOAD_TYPE, len(values), buffers)


def _int_array(values: array.array[int], type_: pa.DataType) -> pa.Array:
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])
