"""One running instance of a function: consume a batch, transform it, publish, then ack.

An instance is an SDK client of the gateway with the function's own identity, so it
may read and write exactly what that identity may. Per input it is one consumer of
the function's subscription (shared or key-shared: instances split the input), and
for each batch it: runs the code; publishes every result with an id derived from the
input position (``<function>:<stream>:<partition>:<offset>``), so a batch processed
again after a crash is dropped by the output stream's dedup instead of published
twice; waits until the results are durable; and only then acks the input. A batch
the code fails on is halved until the failing messages are found, and those go to
the function's dead-letter stream with the error in their headers; the rest goes on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import structlog
from tamto_functions.declarative import Output, Pipeline, compile_steps
from tamto_functions.model import Declarative, FunctionSpec, SubscriptionKind
from tamto_functions.windows import Windows

import tamto_sdk
from tamto_processing.python_code import load
from tamto_sdk.messages import MessageBatch

log = structlog.get_logger("tamto.processing")

#: Messages taken per batch, at most.
BATCH_MESSAGES = 2000
#: How long an idle instance waits for input before it looks at its windows again.
IDLE_WAIT_S = 0.5
#: Header names on a dead-lettered input.
ERROR_HEADER = "tamto.fn.error"

Transform = Callable[[MessageBatch], list[Output]]
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
        self._producers: dict[str, Any] = {}
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
            return lambda batch: self._declarative(pipeline, batch)
        function = load(spec.code)
        return lambda batch: self._python(function, batch)

    def _declarative(self, pipeline: Pipeline, batch: MessageBatch) -> list[Output]:
        return pipeline.run(batch.table, self._windows)

    def _python(
        self, function: Callable[[pa.RecordBatch], Any], batch: MessageBatch
    ) -> list[Output]:
        table = batch.table
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
        """Consume every input until cancelled; publishes are awaited before acks."""
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
        async with self._client.consumer(
            stream,
            self.spec.subscription,
            subscription_type=sdk_type,
            consumer_name=self.instance_id,
            credits=BATCH_MESSAGES * 2,
        ) as consumer:
            while True:
                batch = await consumer.receive_batch(BATCH_MESSAGES, timeout_s=IDLE_WAIT_S)
                if len(batch):
                    await self._process(batch)
                    self.counters.processed += len(batch)
                await self._close_windows()
                if len(batch):
                    consumer.ack(batch)

    async def _process(self, batch: MessageBatch) -> None:
        outputs, failed = self._run_isolating(batch)
        await self._publish(outputs)
        for bad, error in failed:
            await self._dead_letter(bad, error)

    def _run_isolating(
        self, batch: MessageBatch
    ) -> tuple[list[tuple[list[Output], MessageBatch]], list[tuple[MessageBatch, str]]]:
        """The outputs of the parts of `batch` the code succeeds on, and the failing parts."""
        try:
            return [(self._transform(batch), batch)], []
        except Exception as exc:  # user code and bad data: dead-lettered, never fatal
            if len(batch) == 1:
                return [], [(batch, f"{type(exc).__name__}: {exc}"[:500])]
        half = len(batch) // 2
        first = self._run_isolating(batch.slice(0, half))
        second = self._run_isolating(batch.slice(half))
        return first[0] + second[0], first[1] + second[1]

    async def _publish(self, parts: list[tuple[list[Output], MessageBatch]]) -> None:
        waits: list[asyncio.Future[Any]] = []
        for outputs, batch in parts:
            prefix = f"{self.spec.name}:{batch.stream}:{batch.partition}:"
            for output in outputs:
                if not output.table.num_rows:
                    continue
                rows = _with_ids(output.table, prefix)
                producer = await self._producer(output.stream)
                waits.append(await producer.send_batch(rows))
                self.counters.published += rows.num_rows
        if waits:
            await asyncio.gather(*waits)

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

    async def _dead_letter(self, batch: MessageBatch, error: str) -> None:
        self.counters.errors += len(batch)
        self.counters.last_error = error
        log.warning("function failed on input", function=self.spec.name, error=error)
        table = batch.table
        headers = []
        for offset, given in zip(
            table.column("offset").to_pylist(), table.column("headers").to_pylist(), strict=True
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
        ids = [
            f"{self.spec.name}:dlq:{batch.stream}:{batch.partition}:{o}"
            for o in table.column("offset").to_pylist()
        ]
        producer = await self._producer(self.spec.dead_letters)
        await (
            await producer.send_batch(
                table.column("payload").combine_chunks(),
                keys=table.column("key").combine_chunks(),
                headers=headers,
                ids=ids,
            )
        )

    async def _producer(self, stream: str) -> Any:
        producer = self._producers.get(stream)
        if producer is None:
            if stream == self.spec.dead_letters:
                await self._client.streams.ensure(stream, partitions=1)
            producer = self._client.producer(stream)
            await producer.start()
            self._producers[stream] = producer
        return producer


def _with_ids(table: pa.Table, prefix: str) -> pa.Table:
    """`table` with an ``id`` per row: `prefix` and its input offset (and its rank there)."""
    columns = {
        name: table.column(name)
        for name in ("payload", "key", "headers")
        if name in table.column_names
    }
    if "id" in table.column_names:
        columns["id"] = table.column("id")
        return pa.table(columns)
    offsets = pc.cast(table.column("offset"), pa.string())
    ids = pc.binary_join_element_wise(prefix, offsets, "")
    if pc.count_distinct(table.column("offset")).as_py() != table.num_rows:
        seen: dict[int, int] = {}
        suffixes = []
        for offset in table.column("offset").to_pylist():
            rank = seen.get(offset, 0)
            seen[offset] = rank + 1
            suffixes.append(f":{rank}")
        ids = pc.binary_join_element_wise(ids, pa.array(suffixes, pa.string()), "")
    columns["id"] = ids
    return pa.table(columns)
