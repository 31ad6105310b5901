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
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc
import structlog

from tamto_common.errors import TamtoError, Unavailable
from tamto_protocol.batch import decode_batch, encode_record_batch
from tamto_router.dedup import DedupWindow, message_offsets
from tamto_router.model import Batch, LogBounds
from tamto_router.quorum import first_answers
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


class PartitionLog:
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
        self._queue: list[tuple[Batch, asyncio.Future[int]]] = []
        self._wake = asyncio.Event()
        self._grown = asyncio.Event()
        #: Called whenever durable data grows or the log fails (subscriptions wake up).
        self.listeners: set[Callable[[], None]] = set()
        #: Subscriptions on this partition, by name; they die with this log.
        self.subscriptions: dict[str, Any] = {}
        self._sender = asyncio.create_task(self._send_loop(), name=f"append-{stream}/{partition}")

    async def append(self, arrow_ipc: bytes, count: int) -> Appended:
        """Sequence a batch and wait until storage holds it durably.

        Messages whose id is in the dedup window are not stored again; they are
        answered with their original offsets once those are durable.
        """
        if self.failure is not None:
            raise self.failure
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
            if not self._queue:
                await self._wake.wait()
                self._wake.clear()
            pending = self._take_queued()
            if not pending:
                continue
            try:
                await self._store([b for b, _ in pending])
            except TamtoError as exc:
                self._fail(exc, pending)
                return
            except Exception as exc:
                log.exception("append failed", stream=self.stream, partition=self.partition)
                self._fail(Unavailable(f"append failed: {exc}"), pending)
                return
            self.durable_offset = pending[-1][0].end
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
        outcome = await first_answers(
            self.replicas,
            lambda client: client.append(self.stream, self.partition, self.epoch, batches),
            self.quorum,
        )
        if self.storage in [self.replicas[node] for node in outcome.failures]:
            # The read replica failed this append: read from one that has it all.
            node = next(iter(outcome.answers))
            log.warning(
                "read replica failed an append; reading from another",
                stream=self.stream,
                partition=self.partition,
                replica=node,
                failures={n: str(e) for n, e in outcome.failures.items()},
            )
            self.storage = self.replicas[node]

    def _fail(self, exc: TamtoError, pending: list[tuple[Batch, asyncio.Future[int]]]) -> None:
        self.failure = exc
        for _, future in [*pending, *self._queue]:
            if not future.done():
                future.set_exception(exc)
        self._queue = []
        self._grown.set()
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
        """Finish what is queued, then stop the sender."""
        while self._queue and self.failure is None:
            await self.wait_beyond(self._queue[-1][0].base_offset)
        self._sender.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._sender
        for subscription in list(self.subscriptions.values()):
            await subscription.close()
