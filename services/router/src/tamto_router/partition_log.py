"""A partition this router owns: sequencing, the append pipeline, the durable tail.

Appends get offsets synchronously, in call order, then wait in a queue. One
sender task (owned here) sends everything queued in one storage RPC while the
previous one is in flight, so a busy partition costs one RPC and one fsync per
round trip, and order holds because exactly one append is in flight. A failed
append poisons the log: every waiting append fails, and the owner reopens the
partition (learning the true end of the log from storage) on the next request.

A replicated partition (stream replication factor R > 1) sends each append to
every replica of its ledger at once and counts it durable once its ack quorum Q
have it fsynced (`tamto_router.quorum.first_answers`); reads go to `storage`, a
replica that holds every durable entry (it moves to one that answered when it
fails an append). R = 1 keeps the single-node path.

The replicas that take no appends are caught up and lost ones replaced by
`tamto_router.replica_catch_up`, damaged copies repaired by
`tamto_router.damage_repair` (both mixins of `PartitionLog`, which holds the state).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc
import structlog

from tamto_common.errors import (
    DataLoss,
    TamtoError,
    Unavailable,
)
from tamto_common.message_traces import message_span
from tamto_protocol.batch import decode_batch, encode_record_batch
from tamto_router.dedup import DedupWindow, message_offsets
from tamto_router.metrics import count_in
from tamto_router.model import Batch, LogBounds, ProducerOrder
from tamto_router.owner_acks import OwnerAcks
from tamto_router.producer_turns import ProducerTurns
from tamto_router.quorum import (
    first_answers,
    no_quorum,
)
from tamto_router.replica_catch_up import ReplicaCatchUp, Rereplicate
from tamto_router.storage_client import StorageClient

log = structlog.get_logger(__name__)

#: Most bytes of batches sent to storage in one append RPC (every hop allows 64 MiB;
#: one larger batch still goes alone).
MAX_APPEND_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Appended:
    """Where a producer's batch landed. `offsets` is set only when some of its
    messages were duplicates: then it holds every message's offset, in order."""

    base_offset: int
    count: int
    offsets: list[int] | None = None


class PartitionLog(ReplicaCatchUp):
    """One partition this router owns (see the module's docstring)."""

    def __init__(
        self,
        stream: str,
        partition: int,
        epoch: int,
        storage: StorageClient,
        bounds: LogBounds,
        dedup: DedupWindow | None = None,
        replicas: Mapping[str, StorageClient] | None = None,
        quorum: int = 1,
        ensemble: Sequence[str] = (),
        client_for: Callable[[str], StorageClient | None] | None = None,
        rereplicate: Rereplicate | None = None,
    ) -> None:
        self.stream = stream
        self.partition = partition
        self.epoch = epoch
        self.storage = storage
        self.start_offset = bounds.start_offset
        self._next_offset = bounds.next_offset
        self.durable_offset = bounds.next_offset
        self.failure: TamtoError | None = None
        self.dedup = dedup
        #: Replicated only: every replica of the ledger (by storage node; `storage` is
        #: one of them) and the ack quorum.
        self.replicas = dict(replicas) if replicas is not None else None
        self.quorum = quorum
        #: Replicated only: the ledger's storage nodes (those not in `replicas` are
        #: caught up in the background) and how to reach one (None: not registered).
        self.ensemble = tuple(ensemble) or tuple(self.replicas or ())
        #: The first offset of each of the partition's ledgers, ascending, this epoch's
        #: last (set by `Partitions` from the ledger list): a subscription delivers a
        #: ledger's messages only once every earlier one's were acked (`drain_gate`).
        self.ledger_starts: tuple[int, ...] = ()
        self._client_for = client_for
        self._rereplicate = rereplicate
        #: Spares being caught up in place of a member that stayed down (new: old)
        #: until the replacement is recorded in the ledgers.
        self._replacing: dict[str, str] = {}
        #: Replicas the background copy brought close to the end: the sender adds them.
        self._joiners: dict[str, tuple[StorageClient, int]] = {}
        #: Why each lagging replica was not caught up at its last try (logged once each).
        self.catch_up_errors: dict[str, str] = {}
        #: The replicas that answered the last append (they hold every durable entry).
        self._fresh = tuple(self.replicas or ())
        #: Damaged ranges (node, first offset) by when their last repair started.
        self._damage_tried: dict[tuple[str, int], float] = {}
        self._damage_repairs: set[asyncio.Task[None]] = set()
        #: Messages and bytes appended since it opened (load reports, `tamto_router.balancer`).
        self.appended_messages = 0
        self.appended_bytes = 0
        #: When this epoch acknowledged publishes (logged: `tamto_router.owner_acks`).
        self.owner_acks = OwnerAcks(stream, partition, epoch)
        self._queue: list[tuple[Batch, asyncio.Future[int]]] = []
        #: What the sender took from the queue and is storing now.
        self._storing: list[tuple[Batch, asyncio.Future[int]]] = []
        self._wake = asyncio.Event()
        self._grown = asyncio.Event()
        #: Called whenever durable data grows or the log fails (subscriptions wake up).
        self.listeners: set[Callable[[], None]] = set()
        #: Producers' batches in flight together, kept in the order they were sent.
        self.turns = ProducerTurns()
        #: Subscriptions on this partition, by name; they die with this log.
        self.subscriptions: dict[str, Any] = {}
        self._sender = asyncio.create_task(self._send_loop(), name=f"append-{stream}/{partition}")
        self._repair: asyncio.Task[None] | None = None
        if self.replicas is not None and client_for is not None:
            self._repair = asyncio.create_task(
                self._repair_loop(), name=f"repair-{stream}/{partition}"
            )

    async def append(
        self, arrow_ipc: bytes, count: int, order: ProducerOrder | None = None
    ) -> Appended:
        """Sequence a batch and wait until storage holds it durably.

        Messages whose id is in the dedup window are not stored again; they are
        answered with their original offsets once those are durable. A batch of a
        producer with several in flight (`order`) is sequenced only after the one
        it names (`tamto_router.producer_turns`). A batch whose messages carry
        trace context gets a span (`tamto_common.message_traces`).
        """
        with message_span(
            "tamto.router", "tamto.router.append", [arrow_ipc], self.stream, self.partition
        ):
            if order is not None and not self.turns.ready(order):
                await self.turns.wait(order, lambda: self.failure)
            appended = await self._append(arrow_ipc, count, order)
            self.owner_acks.acked()
            return appended

    async def _append(self, arrow_ipc: bytes, count: int, order: ProducerOrder | None) -> Appended:
        if self.failure is not None:
            raise self.failure
        if order is not None:  # nothing below waits before this batch is queued
            self.turns.sequenced(order)
        now_us = time.time_ns() // 1000
        offsets: list[int] | None = None
        if self.dedup is not None:
            batch = decode_batch(arrow_ipc)
            plan = self.dedup.plan(batch.column("id"), now_us)
            if plan.keep is not None:
                offsets = message_offsets(plan, count, self._next_offset)
                if plan.kept == 0:
                    await self.wait_beyond(max(offsets))
                    if self.failure is not None:
                        raise self.failure
                    return Appended(offsets[0], count, offsets)
                batch = pc.filter(batch, plan.keep)
                arrow_ipc, count = encode_record_batch(batch), plan.kept
            base = self._next_offset
            self.dedup.record(batch.column("id"), range(base, base + count), now_us, plan.sequence)
        base = await self._sequence(arrow_ipc, count, now_us)
        if offsets is not None:
            await self.wait_beyond(max(offsets))  # duplicates of messages still in flight
            return Appended(base, len(offsets), offsets)
        return Appended(base, count)

    async def _sequence(self, arrow_ipc: bytes, count: int, now_us: int) -> int:
        batch = Batch(self._next_offset, count, now_us, arrow_ipc)
        self._next_offset += count
        self.appended_messages += count
        self.appended_bytes += len(arrow_ipc)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._queue.append((batch, future))
        self._wake.set()
        return await future

    async def wait_beyond(self, offset: int) -> None:
        """Return once durable data extends past `offset` (or the log failed)."""
        while self.durable_offset <= offset and self.failure is None:
            await self._grown.wait()

    def _take_queued(self) -> list[tuple[Batch, asyncio.Future[int]]]:
        """The oldest queued batches that fit in one storage RPC (at least one)."""
        size = 0
        for i, (batch, _) in enumerate(self._queue):
            size += len(batch.arrow_ipc)
            if i and size > MAX_APPEND_BYTES:
                taken, self._queue = self._queue[:i], self._queue[i:]
                return taken
        taken, self._queue = self._queue, []
        return taken

    async def _send_loop(self) -> None:
        while True:
            if not self._queue and not self._joiners:
                await self._wake.wait()
                self._wake.clear()
            if self._joiners:
                await self._admit_joiners()
            pending = self._take_queued()
            if not pending:
                continue
            self._storing = pending
            try:
                await self._store([b for b, _ in pending])
            except asyncio.CancelledError:
                # Stopped mid-append (`close` after a failure): its callers get an
                # answer now, not their deadline's (the batches may or may not be stored).
                self._fail(
                    self.failure or Unavailable(f"partition {self.stream}/{self.partition} closed"),
                    pending,
                )
                raise
            except TamtoError as exc:
                self._fail(exc, pending)
                return
            except Exception as exc:
                log.exception("append failed", stream=self.stream, partition=self.partition)
                self._fail(Unavailable(f"append failed: {exc}"), pending)
                return
            self._storing = []
            self.durable_offset = pending[-1][0].end
            count_in(
                self.stream,
                sum(b.count for b, _ in pending),
                sum(len(b.arrow_ipc) for b, _ in pending),
            )
            for batch, future in pending:
                if not future.done():
                    future.set_result(batch.base_offset)
            self._grown.set()
            self._grown = asyncio.Event()
            self._notify()

    async def _store(self, batches: list[Batch]) -> None:
        """Append to the one storage node, or to every replica until the quorum has it."""
        if self.replicas is None:
            await self.storage.append(self.stream, self.partition, self.epoch, batches)
            return
        if len(self.replicas) < self.quorum:
            raise no_quorum(len(self.replicas), len(self.ensemble), self.quorum)
        outcome = await first_answers(
            self.replicas,
            lambda client: client.append(self.stream, self.partition, self.epoch, batches),
            self.quorum,
        )
        self._fresh = tuple(outcome.answers)
        for node, error in outcome.failures.items():
            # It misses this append: it takes no more until it is caught up.
            failed = self.replicas.pop(node)
            log.warning(
                "replica failed an append; it is caught up in the background",
                stream=self.stream,
                partition=self.partition,
                replica=node,
                error=str(error),
            )
            if failed is self.storage:  # read from one that has it all
                self.storage = self.replicas[next(iter(outcome.answers))]
            if isinstance(error, DataLoss):  # its WAL is damaged: repair it
                self.repair_damage(node, failed, error)

    async def read(self, first: int, want: int) -> tuple[list[Batch], int]:
        """Batches from `first` on (the first may start before it) and where the next
        read starts, from `storage`. On a replicated log a range `storage` answers
        DATA_LOSS for is read from another replica that takes appends (it holds every
        durable entry), and the damaged one is repaired from it (`repair_damage`):
        DATA_LOSS only when no replica reads the range."""
        try:
            return await self.storage.read(self.stream, self.partition, first, want)
        except DataLoss as exc:
            damaged = self._node_of(self.storage)
            if damaged is None:
                raise
            for node, client in self._other_replicas(damaged):
                try:
                    batches, next_offset = await client.read(
                        self.stream, self.partition, first, want, from_cache=False
                    )
                except TamtoError:
                    continue
                if batches:
                    log.warning(
                        "damaged range read from another replica",
                        stream=self.stream,
                        partition=self.partition,
                        replica=damaged,
                        healthy=node,
                        error=str(exc),
                    )
                    self.repair_damage(damaged, self.storage, exc)
                    return batches, next_offset
            raise

    def _fail(self, exc: TamtoError, pending: list[tuple[Batch, asyncio.Future[int]]]) -> None:
        self.failure = exc
        for _, future in [*pending, *self._queue]:
            if not future.done():
                future.set_exception(exc)
        self._queue = []
        self._grown.set()
        self.turns.wake()
        self._notify()

    def _notify(self) -> None:
        for listener in list(self.listeners):
            listener()

    def range_shrunk(self, start: int) -> None:
        """Storage announced that retention moved the start to `start` or rewrote
        segments: forget cached batches of the partition and wake the subscriptions
        (one below the start skips to it at its next read)."""
        self.start_offset = max(self.start_offset, start)
        self.storage.forget_cached(self.stream, self.partition)
        self._notify()

    async def follow_start(self) -> int:
        """Learn the partition's start from storage now, dropping cached batches
        below it (docs/segments.md, "The readable range"); returns it."""
        start = await self.storage.current_start(self.stream, self.partition, self.epoch)
        self.start_offset = max(self.start_offset, start)
        return self.start_offset

    async def close(self) -> None:
        """Finish what is queued or being stored, then stop the sender (a partition
        handed back answers every publish it took: none waits for its deadline)."""
        while (self._queue or self._storing) and self.failure is None:
            await self.wait_beyond((self._queue or self._storing)[-1][0].base_offset)
        for task in (self._sender, self._repair, *self._damage_repairs):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for subscription in list(self.subscriptions.values()):
            await subscription.close()
        self.owner_acks.over()
        if self.failure is None:
            # A caller that took this log just before it was closed (a partition
            # handed back) must not queue behind a stopped sender: it gets a retriable
            # error and resends to the partition's owner (dedup makes that safe).
            self._fail(
                Unavailable(f"partition {self.stream}/{self.partition} was closed on this router"),
                [],
            )


def drain_gate(ledger_starts: Sequence[int], ack_floor: int) -> int | None:
    """Where delivery to a subscription whose ack floor is `ack_floor` stops for now:
    the first offset of the first ledger above it (that ledger's messages wait until
    every earlier one was acked, so a key's order holds across a change of owner,
    docs/cluster.md section 4), or None when the floor is in the last ledger. It is
    derived from the ledger list and the cursor only, so it survives restarts."""
    i = bisect.bisect_right(ledger_starts, ack_floor)
    return ledger_starts[i] if i < len(ledger_starts) else None
