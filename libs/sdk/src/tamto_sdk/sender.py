"""The producer's sender: publishes the accumulator's batches, several per partition.

Each partition that has had a batch gets one task that takes its next due batch
from the accumulator (`Accumulator.ready`) whenever fewer than `max_in_flight`
of its batches are unanswered, encodes it and publishes it in a task of its own,
which reports the outcome (`Accumulator.finish`); with one in flight (the default)
it publishes the batch itself. As aiokafka's ``Sender``, this
is where a batch meets the network:

- idempotence: every message without an id gets ``<producer id>:<sequence>``
  when its batch is encoded, once, so a resend carries the same ids and the
  server's dedup window stores it at most once;
- order with several batches in flight (Kafka's idempotent producer keeps five):
  each batch names its producer, its highest generated sequence number and, while
  the batch sent before it to the partition is unanswered, that one's
  (`tamto.v1.ProducerOrder`); the router stores it only after that one
  (`tamto_router.producer_turns`), so a retry or a reordering on the way keeps
  the order per partition. A batch without generated ids (every id given by the
  application, or `idempotent=False`) goes alone: nothing else of its partition
  is in flight with it;
- retries: `Calls.unary` retries what `tamto_sdk.errors` marks retriable until
  `ClientOptions.retry_deadline_s`; with ids on every message a call cut off
  mid-flight is retriable too (`from_rpc_error(deduplicated=True)`);
- the direct path (`ClientOptions.direct`): a batch goes straight to the router
  owning its partition (`tamto_sdk.direct`), through the gateway when it cannot;
- reconnecting: the pipelined publish stream (`tamto_protocol.pipelined`) and the
  channel's reconnect backoff re-establish the connection under a retried call.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import pyarrow as pa

from tamto_protocol.wire import publish_request
from tamto_sdk._calls import Calls
from tamto_sdk.accumulator import Accumulator
from tamto_sdk.columns import encode, with_ids
from tamto_sdk.errors import Closed, Internal, InvalidArgument, TamtoError
from tamto_sdk.producer_batch import ProducerBatch

__all__ = ["MAX_IN_FLIGHT", "Encoded", "Sender"]


class Encoded(NamedTuple):
    """A batch ready to send."""

    arrow_ipc: pa.Buffer
    #: The highest sequence number generated for its ids; None: none was (the batch
    #: goes alone).
    last: int | None
    #: Every message has an id: the server deduplicates a resend.
    deduplicated: bool


#: Most batches of one partition unanswered at once, by default. Kafka's idempotent
#: producer allows 5; here 5 made batches smaller and cost throughput and publish→deliver
#: latency in `tamto bench` (docs/benchmarks.md), so several in flight is asked for.
MAX_IN_FLIGHT = 1


class _Lane:
    """One partition's batches in flight: by ticket (the order they were taken),
    each one's highest generated sequence number (None: it goes alone)."""

    __slots__ = ("batches", "changed", "tasks", "tickets")

    def __init__(self) -> None:
        self.batches: dict[int, int | None] = {}
        self.tickets = 0
        self.changed = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()

    def alone(self) -> bool:
        """Whether a batch that goes alone is in flight."""
        return any(last is None for last in self.batches.values())

    async def wait_until(self, room: Callable[[], bool]) -> None:
        while not room():
            self.changed.clear()
            await self.changed.wait()

    def after(self, ticket: int) -> int | None:
        """The sequence number of the batch sent just before `ticket`'s if it is
        still unanswered (None: every earlier one is answered)."""
        earlier = [t for t in self.batches if t < ticket]
        return self.batches[max(earlier)] if earlier else None

    def done(self, ticket: int) -> None:
        del self.batches[ticket]
        self.changed.set()


class Sender:
    """Publishes one stream's batches from an `Accumulator`, a task per partition."""

    def __init__(
        self,
        calls: Calls,
        accumulator: Accumulator,
        stream: str,
        *,
        producer_name: str | None,
        idempotent: bool,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self._calls = calls
        self._accumulator = accumulator
        self._stream = stream
        self._producer_name = producer_name
        self._idempotent = idempotent
        self._max_in_flight = max_in_flight
        #: The prefix of the ids this producer generates: unique per producer instance.
        self.producer_id = f"{producer_name or 'p'}-{uuid.uuid4().hex[:12]}"
        self._sequence = 0
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._lanes: dict[int, _Lane] = {}

    @property
    def in_flight(self) -> int:
        """Batches sent and not answered yet, over every partition."""
        return sum(len(lane.batches) for lane in self._lanes.values())

    def start(self, partition: int) -> None:
        """Start `partition`'s sender task (the accumulator has a queue for it)."""
        if partition not in self._tasks:
            self._tasks[partition] = asyncio.get_running_loop().create_task(
                self._run(partition), name=f"tamto-producer-{self._stream}-{partition}"
            )

    async def close(self) -> None:
        """Stop every partition's task; what they had not published fails with `Closed`."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self, partition: int) -> None:
        """Take the partition's next due batch when there is room, publish it, repeat."""
        accumulator = self._accumulator
        lane = self._lanes[partition] = _Lane()
        batch: ProducerBatch | None = None
        limit = self._max_in_flight
        try:
            while True:
                await lane.wait_until(lambda: len(lane.batches) < limit and not lane.alone())
                batch = await accumulator.ready(partition)
                try:
                    encoded = self.encode(batch)
                except Exception as exc:
                    accumulator.finish(batch, InvalidArgument(f"cannot encode batch: {exc}"))
                    batch = None
                    continue
                last = encoded.last
                if last is None:  # it goes alone
                    await lane.wait_until(lambda: not lane.batches)
                ticket = lane.tickets
                lane.tickets += 1
                lane.batches[ticket] = last
                if limit == 1:
                    # Nothing can go beside it: publish here, not in a task of its own
                    # (a task's start and end are two more loop hand-offs per batch).
                    taken, batch = batch, None
                    await self._publish_one(partition, lane, ticket, taken, encoded)
                    continue
                task = asyncio.create_task(
                    self._publish_one(partition, lane, ticket, batch, encoded)
                )
                lane.tasks.add(task)
                task.add_done_callback(lane.tasks.discard)
                batch = None
        except asyncio.CancelledError:
            for task in list(lane.tasks):
                task.cancel()
            if lane.tasks:
                await asyncio.wait(list(lane.tasks))
            error = Closed("producer closed before the message was published")
            accumulator.abort(partition, batch, error)
            raise

    async def _publish_one(
        self, partition: int, lane: _Lane, ticket: int, batch: ProducerBatch, encoded: Encoded
    ) -> None:
        """Publish one taken batch and report its outcome."""
        error: TamtoError | None = Closed("producer closed before the message was published")
        try:
            error = await self._publish(partition, lane, ticket, batch, encoded)
        finally:
            lane.done(ticket)
            self._accumulator.finish(batch, error)

    def encode(self, batch: ProducerBatch) -> Encoded:
        """The batch in Arrow IPC form, with its ids (`idempotent`: generated where
        the application gave none)."""
        key, payload, headers, ids, event_time = batch.columns()
        last: int | None = None
        if self._idempotent:
            missing = ids.null_count
            ids = with_ids(ids, self.producer_id, self._sequence)
            self._sequence += missing
            if missing:
                last = self._sequence - 1
        encoded = encode((key, payload, headers, ids, event_time), self._producer_name)
        return Encoded(encoded, last, ids.null_count == 0)

    async def _publish(
        self, partition: int, lane: _Lane, ticket: int, batch: ProducerBatch, encoded: Encoded
    ) -> TamtoError | None:
        """Publish `batch`; resolve its futures and return None, or return the error."""
        try:
            count = batch.count
            stream = self._stream
            arrow_ipc, last, deduplicated = encoded
            producer = self.producer_id

            def request(call_id: int) -> bytes:
                # In wire form: the Arrow bytes are copied once, not three times. The
                # batch ahead is named afresh on each try: once answered it is not.
                order = None if last is None else (producer, last, lane.after(ticket))
                return publish_request(stream, partition, arrow_ipc, count, call_id, order)

            # Straight to the partition's owner when the client may (`ClientOptions.direct`,
            # `tamto_sdk.direct`) and a resend is safe; None: through the gateway.
            direct = self._calls.direct
            response: Any = None
            if direct is not None and deduplicated:
                response = await direct.publish(stream, partition, request)
            if response is None:
                # With ids on every message, a send cut off mid-call is retried too: the
                # server's dedup window recognises it if the first one was stored.
                response = await self._calls.unary(
                    self._calls.publish_raw, request, deduplicated=deduplicated
                )
            if int(response.count) not in (0, count):
                raise Internal(f"published {count} messages but {response.count} acked")
            base = int(response.base_offset)
            # Set when the server recognised duplicates: every message's own offset.
            offsets: Sequence[int] = list(response.offsets) or range(base, base + count)
            if len(offsets) != count:
                raise Internal(f"published {count} messages but got {len(offsets)} offsets")
            batch.resolve(stream, int(response.partition), offsets)
        except TamtoError as exc:
            return exc
        except Exception as exc:  # a bug must not leave futures hanging
            return Internal(f"unexpected error while publishing: {exc!r}")
        return None
