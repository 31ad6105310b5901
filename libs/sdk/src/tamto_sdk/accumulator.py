"""The producer's accumulator: messages collected into per-partition batches.

`Producer.send` and `Producer.send_batch` add messages here; the sender
(`tamto_sdk.sender`) takes finished batches from here, one partition at a time,
and hands back each batch's outcome. As aiokafka's ``MessageAccumulator``, this
is where batching decisions live: which partition a message goes to (its key's,
or the sticky partition for keyless ones), when a batch is full
(`max_batch_messages`, `max_batch_bytes`), how long an open one lingers,
backpressure (`max_pending_messages`) and `flush`. It sends nothing itself.

The hot path stays cheap: a plain `send` is two list appends to its partition's
open batch and a future; rows of `send_batch` join as whole Arrow slices. The
columns are built once per batch (`tamto_sdk.columns`) when the sender takes it.
A batch itself, and how its outcome reaches each future, is `tamto_sdk.producer_batch`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import deque
from collections.abc import Callable, Mapping
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tamto_protocol.batch import int_values
from tamto_protocol.partitioning import partition_for_key
from tamto_sdk.columns import (
    MESSAGE_OVERHEAD,
    Columns,
    row_sizes,
)
from tamto_sdk.errors import Closed, TamtoError
from tamto_sdk.messages import PublishResult
from tamto_sdk.producer_batch import BatchOutcome, ProducerBatch, Rows

__all__ = ["Accumulator"]


class Accumulator:
    """Per-partition queues of batches for one stream, and when each may go.

    Keyed messages go to ``partition_for_key(key, partitions)``; keyless ones fill
    the sticky partition's batch and rotate to the next partition between batches.
    A partition's queue holds the batches not yet taken by its sender; the last
    one may still be open (taking messages). `on_partition(partition)` is called
    when a partition gets its first batch, to start that partition's sender, which
    then loops on `ready` and `finish`.
    """

    def __init__(
        self,
        stream: str,
        *,
        linger_s: float,
        max_batch_messages: int,
        max_batch_bytes: int,
        max_pending_messages: int,
        on_partition: Callable[[int], object],
    ) -> None:
        self._stream = stream
        self._linger_s = linger_s
        self._max_batch_messages = max_batch_messages
        self._max_batch_bytes = max_batch_bytes
        self._max_pending = max_pending_messages
        self._on_partition = on_partition
        self._partitions = 0
        self._sticky = 0
        self._sticky_taken = 0  # messages sent to the sticky partition since it was chosen
        self._queues: dict[int, deque[ProducerBatch]] = {}
        self._open: dict[int, ProducerBatch] = {}
        self._wakes: dict[int, asyncio.Event] = {}
        self._unfinished: set[ProducerBatch] = set()
        #: Messages added whose batch has no outcome yet (read on every `send`).
        self.pending = 0
        self._space = asyncio.Event()
        self._space.set()
        self._flushing = 0
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, partitions: int, loop: asyncio.AbstractEventLoop) -> None:
        """The stream's partition count is known: messages can be added."""
        self._partitions = partitions
        self._sticky = random.randrange(partitions)
        self._loop = loop

    def close(self) -> None:
        """No more messages: open batches go without lingering, waiters for space
        get `Closed`."""
        self._closed = True
        self._space.set()
        for wake in self._wakes.values():
            wake.set()

    # -- adding messages ------------------------------------------------------

    def add(
        self,
        payload: bytes,
        key: bytes | None,
        headers: Mapping[str, str] | None,
        id: str | None,
        event_time: datetime | None,
        plain: bool,
    ) -> asyncio.Future[PublishResult]:
        """Add one message (`plain`: it has no key, headers, id or event time) and
        return the future of its `PublishResult`."""
        size = len(payload) + MESSAGE_OVERHEAD
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
            singles.add(payload, future, key, headers, id, event_time)
        batch.count += 1
        batch.bytes += size
        self.pending += 1
        if batch.count >= self._max_batch_messages or batch.bytes >= self._max_batch_bytes:
            self._close_open(partition)
            if key is None:
                self._rotate_sticky()
        return future

    @property
    def partitions(self) -> int:
        """The stream's partition count (0 before `start`)."""
        return self._partitions

    def add_rows(
        self, columns: Columns, outcome: BatchOutcome, partition: int | None = None
    ) -> None:
        """Add the rows of one `send_batch` call (``columns``, at least one row),
        whose results go to `outcome`; all of them to `partition` if given."""
        n = len(columns[1])
        sizes = row_sizes(columns)
        key_column = columns[0]
        if partition is not None or key_column.null_count == n:
            self._add_rows(partition, columns, range(n), sizes, outcome)
        else:
            groups: dict[int | None, list[int]] = {}
            for row, key in enumerate(key_column.to_pylist()):
                group = None if key is None else partition_for_key(key, self._partitions)
                groups.setdefault(group, []).append(row)
            for partition, rows in groups.items():
                taken = pa.array(rows, pa.int64())
                group_columns = tuple(c.take(taken) for c in columns)
                self._add_rows(partition, group_columns, rows, sizes.take(taken), outcome)
        self.pending += n

    def _add_rows(
        self,
        partition: int | None,
        columns: Columns,
        rows: range | list[int],
        sizes: pa.Array,
        outcome: BatchOutcome,
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
            batch.add_rows(
                Rows(part_columns, outcome, rows[start:end]), int(cumulative[end - 1]) - before
            )
            start = end
            if batch.count >= self._max_batch_messages or batch.bytes >= self._max_batch_bytes:
                self._close_open(target)
                if partition is None:
                    self._rotate_sticky()

    async def wait_for_space(self) -> None:
        """Wait while `max_pending_messages` are unresolved; `Closed` if closed meanwhile."""
        while self.pending >= self._max_pending:
            self._space.clear()
            await self._space.wait()
            if self._closed:
                raise Closed("producer is closed")

    def _rotate_sticky(self) -> None:
        """Move keyless messages to the next partition (the current batch is closed)."""
        self._sticky = (self._sticky + 1) % self._partitions
        self._sticky_taken = 0

    def _new_batch(self, partition: int) -> ProducerBatch:
        """Open a new batch for `partition` (its open one is closed or missing)."""
        loop: asyncio.AbstractEventLoop = self._loop  # type: ignore[assignment]
        batch = ProducerBatch(loop.time(), loop.create_future())
        queue = self._queues.get(partition)
        if queue is None:
            queue = self._queues[partition] = deque()
            self._wakes[partition] = asyncio.Event()
            self._on_partition(partition)
        queue.append(batch)
        self._open[partition] = batch
        self._unfinished.add(batch)
        self._wakes[partition].set()
        return batch

    def _close_open(self, partition: int) -> None:
        """No more messages join `partition`'s open batch: it goes without lingering."""
        if self._open.pop(partition, None) is not None:
            self._wakes[partition].set()

    # -- the sender's side ----------------------------------------------------

    async def ready(self, partition: int) -> ProducerBatch:
        """Wait for `partition`'s next batch to be due and take it from the queue.

        A closed batch is due at once; the open one `linger_s` after its first
        message, or at once while flushing or closing (it is closed then).
        """
        queue = self._queues[partition]
        wake = self._wakes[partition]
        loop: asyncio.AbstractEventLoop = self._loop  # type: ignore[assignment]
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
            return batch

    def finish(self, batch: ProducerBatch, error: TamtoError | None) -> None:
        """`batch` is done (resolved by the sender, or failed with `error`): release
        its share of `max_pending_messages` and wake `flush`."""
        if error is not None:
            batch.fail(error)
        if batch in self._unfinished:
            self._unfinished.discard(batch)
            self.pending -= batch.count
            if self.pending < self._max_pending:
                self._space.set()
        if not batch.done.done():
            batch.done.set_result(None)

    def abort(self, partition: int, taken: ProducerBatch | None, error: TamtoError) -> None:
        """`partition`'s sender stops: fail the batch it had `taken` and every queued one."""
        queue = self._queues.get(partition, deque())
        for failed in [*([taken] if taken is not None else []), *queue]:
            self.finish(failed, error)
        queue.clear()
        self._open.pop(partition, None)

    async def flush(self) -> None:
        """Make every batch due now (no lingering) and wait until all have an outcome."""
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
