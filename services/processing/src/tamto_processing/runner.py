"""One running instance of a function: consume batches, transform them, publish, then ack.

An instance is an SDK client of the gateway with the function's own identity, so it
may read and write exactly what that identity may. Per input it is one consumer of
the function's subscription (shared or key-shared: instances split the input), and
for each batch it: runs the code; publishes every result with an id derived from the
input position (``<function>:<stream>:<partition>:<offset>``), keyless results to a
partition fixed by the input partition, so a batch processed again after a crash lands
where it did and the output stream's dedup drops it instead of storing it twice; and
acks the input once those results are durable. Up to `IN_FLIGHT` batches per input are
published and not yet durable at a time (consume, transform and publish overlap; each
ack still waits for its own batch's results). The messages the code fails on are found
by `tamto_processing.isolation` and go to the function's dead-letter stream with the
error in their headers; the rest goes on.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import structlog
from tamto_functions.declarative import Output, compile_steps
from tamto_functions.model import Declarative, FunctionSpec, SubscriptionKind
from tamto_functions.windows import Windows

import tamto_sdk
from tamto_processing.isolation import run_isolating
from tamto_processing.python_code import load
from tamto_sdk.messages import MessageBatch
from tamto_sdk.producer import Producer

log = structlog.get_logger("tamto.processing")

#: Messages taken per batch, at most.
BATCH_MESSAGES = 2000
#: Batches per input whose results are published and not yet durable, at most.
IN_FLIGHT = 4
#: Messages per publish, at most: a batch's results go out as one publish (one run of ids).
PUBLISH_MESSAGES = 10_000
#: How long an idle instance waits for input before it looks at its windows again.
IDLE_WAIT_S = 0.5
#: Header names on a dead-lettered input.
ERROR_HEADER = "tamto.fn.error"

#: The code on a batch's table (or a slice of it) from an input partition.
Transform = Callable[[pa.Table, int], list[Output]]
SaveState = Callable[[bytes], Awaitable[None]]


@dataclass(slots=True)
class Counters:
    """What an instance reports in its status."""

    processed: int = 0
    published: int = 0
    errors: int = 0
    last_error: str = ""
    started_at: float = field(default_factory=time.time)


class Instance:
    """Runs one instance (`<function>#<i>`) of `spec` until cancelled."""

    def __init__(
        self,
        spec: FunctionSpec,
        instance_id: str,
        client: tamto_sdk.Client,
        state: bytes | None = None,
        save_state: SaveState | None = None,
    ) -> None:
        self.spec = spec
        self.instance_id = instance_id
        self._client = client
        self.counters = Counters()
        self._producers: dict[str, Producer] = {}
        self._windows: Windows | None = None
        self._save_state = save_state
        self._transform = self._build(state)

    def _build(self, state: bytes | None) -> Transform:
        spec = self.spec
        if isinstance(spec.code, Declarative):
            pipeline = compile_steps(spec.code.steps, spec.output)
            if pipeline.window is not None:
                self._windows = Windows(pipeline.window, spec.name)
                if state:
                    self._windows.restore(state)
            return lambda table, partition: pipeline.run(table, self._windows, partition)
        function = load(spec.code)
        return lambda table, _: self._python(function, table)

    def _python(self, function: Callable[[pa.RecordBatch], Any], table: pa.Table) -> list[Output]:
        result = function(table.combine_chunks().to_batches()[0] if table.num_rows else table)
        if result is None:
            return []
        if isinstance(result, pa.RecordBatch):
            result = pa.Table.from_batches([result])
        if not isinstance(result, pa.Table) or "payload" not in result.column_names:
            raise TypeError("a batch function returns a RecordBatch or Table with a payload column")
        if "offset" not in result.column_names and result.num_rows == table.num_rows:
            result = result.append_column("offset", table.column("offset"))
        return [Output(self.spec.output, result)]

    async def run(self) -> None:
        """Consume every input until cancelled; each ack waits for its batch's results."""
        try:
            await asyncio.gather(
                *(self._consume(i.stream, i.subscription) for i in self.spec.inputs)
            )
        finally:
            for producer in self._producers.values():
                await producer.close()

    async def _consume(self, stream: str, kind: SubscriptionKind) -> None:
        sdk_type = (
            tamto_sdk.SubscriptionType.KEY_SHARED
            if kind is SubscriptionKind.KEY_SHARED
            else tamto_sdk.SubscriptionType.SHARED
        )
        # A window function acks each batch once its state (saved by _close_windows) has it.
        limit = 0 if self._windows is not None else IN_FLIGHT
        async with self._client.consumer(
            stream,
            self.spec.subscription,
            subscription_type=sdk_type,
            consumer_name=self.instance_id,
            credits=BATCH_MESSAGES * (IN_FLIGHT + 1),
        ) as consumer:
            in_flight: deque[tuple[MessageBatch, Awaitable[Any]]] = deque()
            while True:
                wait = 0.0 if in_flight else IDLE_WAIT_S
                batch = await consumer.receive_batch(BATCH_MESSAGES, timeout_s=wait)
                if len(batch):
                    in_flight.append((batch, await self._process(batch)))
                await self._close_windows()
                while in_flight and (len(in_flight) > limit or not len(batch)):
                    done, published = in_flight.popleft()
                    await published
                    self.counters.processed += len(done)
                    consumer.ack(done)

    async def _process(self, batch: MessageBatch) -> Awaitable[Any]:
        """Runs the code on `batch` and hands its results and dead letters to producers:
        what to await before the batch may be acked."""
        table = batch.table
        found = run_isolating(
            lambda a, b: self._transform(table.slice(a, b - a), batch.partition), len(batch)
        )
        waits = await self._publish(batch, [o for _, _, outputs in found.good for o in outputs])
        if found.bad:
            waits.append(await self._dead_letter(batch, table, found.bad))
        return asyncio.gather(*waits)

    async def _publish(self, batch: MessageBatch, outputs: list[Output]) -> list[Awaitable[Any]]:
        """Each output stream's rows of `batch` as one publish (an id per row)."""
        by_stream: dict[str, list[pa.Table]] = {}
        for output in outputs:
            if output.table.num_rows:
                by_stream.setdefault(output.stream, []).append(output.table)
        prefix = f"{self.spec.name}:{batch.stream}:{batch.partition}:"
        waits: list[Awaitable[Any]] = []
        for stream, tables in by_stream.items():
            table = tables[0] if len(tables) == 1 else _concat(tables)
            rows = _with_ids(table, prefix, batch.last_offset)
            producer = await self._producer(stream)
            partition = await self._partition(stream, batch, rows)
            waits.append(await producer.send_batch(rows, partition=partition))
            self.counters.published += rows.num_rows
        return waits

    async def _partition(self, stream: str, batch: MessageBatch, rows: pa.Table) -> int | None:
        """Keyless rows go where the input partition's always go; keyed rows by key."""
        if "key" in rows.column_names and rows.column("key").null_count < rows.num_rows:
            return None
        return batch.partition % await self._client.streams.partition_count(stream)

    async def _close_windows(self) -> None:
        if self._windows is None:
            return
        closed = self._windows.close(int(time.time() * 1_000_000))
        if closed is not None:
            producer = await self._producer(self.spec.output)
            await (await producer.send_batch(closed))
            self.counters.published += closed.num_rows
        if self._save_state is not None:
            await self._save_state(self._windows.snapshot())

    async def _dead_letter(
        self, batch: MessageBatch, table: pa.Table, bad: list[tuple[int, str]]
    ) -> Awaitable[Any]:
        """The failing messages of `batch` as one publish to the dead-letter stream."""
        self.counters.errors += len(bad)
        self.counters.last_error = bad[-1][1]
        log.warning(
            "function failed on input", function=self.spec.name, messages=len(bad), error=bad[0][1]
        )
        rows = table.take(pa.array([row for row, _ in bad], pa.int64()))
        offsets = rows.column("offset").to_pylist()
        headers = []
        for (_, error), offset, given in zip(
            bad, offsets, rows.column("headers").to_pylist(), strict=True
        ):
            pairs = dict(given or [])
            pairs.update(
                {
                    ERROR_HEADER: error,
                    "tamto.fn.name": self.spec.name,
                    "tamto.fn.input": f"{batch.stream}/{batch.partition}@{offset}",
                }
            )
            headers.append(pairs)
        prefix = f"{self.spec.name}:dlq:{batch.stream}:{batch.partition}:"
        stream = self.spec.dead_letters
        producer = await self._producer(stream)
        return await producer.send_batch(
            rows.column("payload").combine_chunks(),
            keys=rows.column("key").combine_chunks(),
            headers=headers,
            ids=[f"{prefix}{o}" for o in offsets],
            partition=batch.partition % await self._client.streams.partition_count(stream),
        )

    async def _producer(self, stream: str) -> Producer:
        producer = self._producers.get(stream)
        if producer is None:
            if stream == self.spec.dead_letters:
                await self._client.streams.ensure(stream, partitions=1)
            producer = self._client.producer(
                stream, max_batch_messages=PUBLISH_MESSAGES, max_batch_bytes=8 << 20
            )
            await producer.start()
            self._producers[stream] = producer
        return producer


def _concat(tables: list[pa.Table]) -> pa.Table:
    """One output stream's rows from several parts of a batch (columns a part lacks: null)."""
    return pa.concat_tables(tables, promote_options="default")


def _with_ids(table: pa.Table, prefix: str, last_offset: int) -> pa.Table:
    """`table` with an ``id`` per row: `prefix` and its input offset (and its rank there).

    Rows without an input offset count as the batch's last message's results.
    """
    columns = {
        name: table.column(name)
        for name in ("payload", "key", "headers")
        if name in table.column_names
    }
    if "id" in table.column_names:
        columns["id"] = table.column("id")
        return pa.table(columns)
    if "offset" in table.column_names:
        offsets = table.column("offset").combine_chunks()
    else:
        offsets = pa.repeat(pa.scalar(last_offset, pa.int64()), table.num_rows)
    ids = pc.binary_join_element_wise(prefix, pc.cast(offsets, pa.string()), "")
    ranks = _ranks(offsets)
    if ranks is not None:
        ids = pc.binary_join_element_wise(ids, pc.cast(ranks, pa.string()), ":")
    columns["id"] = ids
    return pa.table(columns)


def _ranks(offsets: pa.Array) -> pa.Array | None:
    """Each row's rank among the rows of its offset (None when every offset is distinct)."""
    values = offsets.to_numpy(zero_copy_only=False)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts = np.empty(len(ordered), dtype=bool)
    starts[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    if starts.all():
        return None
    index = np.arange(len(ordered))
    ranks = np.empty(len(ordered), dtype=np.int64)
    ranks[order] = index - np.maximum.accumulate(np.where(starts, index, 0))
    return pa.array(ranks)
