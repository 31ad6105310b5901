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

A replica of the ensemble that takes no appends (it failed one, was down at the
claim, or was behind) is caught up in the background (`_repair_loop`, every
`REPAIR_INTERVAL_S`): once registered again it is opened with this epoch, a tail
it kept past a recovered ledger's end (entries the log does not have) is
truncated (`quorum.agreed_end`, Storage `TruncatePartition`), the entries it
lacks are copied to it from a replica that has them until it is within
`JOIN_GAP` messages of the durable end, and the sender copies the rest
between two appends and adds it to the replicas (BookKeeper's recovery of a
bookie that missed writes, docs/cluster.md section 2).

A replica whose copy is damaged (a read or its sealing met a segment or WAL frame
failing its checksum: DATA_LOSS naming the file and the range) is repaired from a
healthy one (`repair_damage`, in the background): the range is read from a
replica that takes appends and reads it intact and sent to the damaged node
(Storage `RepairRange`), which checks the copy and installs it in place of the
damaged file. Meanwhile `read` serves that range from the healthy replica, so a
consumer gets DATA_LOSS only when no replica reads it (docs/cluster.md section 2).

With `Rereplicate`, a member that stays unregistered for `after_s` is replaced by
a spare storage node (BookKeeper's autorecovery): the spare is caught up the same
way from offset 0, and once it takes appends the replacement is recorded in
every ledger of the partition (`Rereplicate.record`).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc
import structlog

from tamto_common.errors import (
    DataLoss,
    FailedPrecondition,
    TamtoError,
    Unavailable,
    damaged_offsets,
)
from tamto_common.message_traces import message_span
from tamto_protocol.batch import decode_batch, encode_record_batch
from tamto_router.cursor_sync import sync_cursors
from tamto_router.dedup import DedupWindow, message_offsets
from tamto_router.metrics import count_in
from tamto_router.model import Batch, LogBounds, ProducerOrder
from tamto_router.producer_turns import ProducerTurns
from tamto_router.quorum import (
    agreed_end,
    copy_entries,
    first_answers,
    no_quorum,
    read_entries,
)
from tamto_router.storage_client import StorageClient

log = structlog.get_logger(__name__)

#: Most bytes of batches sent to storage in one append RPC (every hop allows 64 MiB;
#: one larger batch still goes alone).
MAX_APPEND_BYTES = 32 * 1024 * 1024

#: How often a replicated log tries to catch up the replicas that take no appends.
REPAIR_INTERVAL_S = 1.0
#: A lagging replica is copied to in the background until it is within this many
#: messages of the durable end; the sender copies the rest before its next append.
JOIN_GAP = 1_000
#: Most Arrow bytes one repair of a damaged range sends (every hop allows 64 MiB); a
#: larger range stays served from a healthy replica until repaired offline.
MAX_REPAIR_BYTES = 48 * 1024 * 1024
#: How long after a failed repair of a damaged range it is tried again.
REPAIR_RETRY_S = 10.0
#: How long an ensemble member stays unregistered before its data is copied to a
#: spare storage node (a restart usually registers again well within it).
REREPLICATE_AFTER_S = 10.0
#: How storage refuses to truncate sealed offsets (`Partition.truncate`: "offsets below
#: N are sealed"): a replica whose divergent tail is sealed can never agree.
SEALED_REFUSAL = "are sealed"


class Diverged(Unavailable):
    """A replica's copy differs from the log's where storage cannot drop it (sealed)."""


@dataclass(frozen=True)
class Rereplicate:
    """How a replicated log replaces a member that stays down (or whose copy diverged
    where it cannot be truncated).

    Attributes:
        spare_for: a registered storage node outside the given ensemble, or None when
            there is none (the log's `client_for` reaches it).
        record: puts the second node where the first was in the partition's ledgers.
        after_s: how long a member is unregistered (or diverged) before it is replaced.
    """

    spare_for: Callable[[tuple[str, ...]], str | None]
    record: Callable[[str, str], Awaitable[None]]
    after_s: float = REREPLICATE_AFTER_S


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
            return await self._append(arrow_ipc, count, order)

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

    def _node_of(self, client: StorageClient) -> str | None:
        """The replica `client` calls (replicated logs only)."""
        return next((n for n, c in (self.replicas or {}).items() if c is client), None)

    def _other_replicas(self, node: str) -> list[tuple[str, StorageClient]]:
        """The replicas taking appends but `node`, those that answered the last append first."""
        assert self.replicas is not None
        fresh = [n for n in self._fresh if n in self.replicas]
        order = [*fresh, *(n for n in self.replicas if n not in fresh)]
        return [(n, self.replicas[n]) for n in order if n != node]

    def repair_damage(self, node: str, client: StorageClient, exc: DataLoss) -> None:
        """Repair in the background the range of replica `node` that `exc` names damaged,
        from a replica that reads it intact (replicated logs; one try per range at a
        time, a failed one tried again after `REPAIR_RETRY_S`)."""
        damaged = damaged_offsets(str(exc))
        if damaged is None or self.replicas is None:
            return
        key = (node, damaged[0])
        now = time.monotonic()
        tried = self._damage_tried.get(key)
        if tried is not None and now - tried < REPAIR_RETRY_S:
            return
        self._damage_tried[key] = now
        task = asyncio.create_task(
            self._repair_range(node, client, *damaged),
            name=f"repair-damage-{self.stream}/{self.partition}-{node}",
        )
        self._damage_repairs.add(task)
        task.add_done_callback(self._damage_repairs.discard)

    async def _repair_range(
        self, node: str, client: StorageClient, first: int, last: int | None
    ) -> None:
        """Read offsets `first`..`last` (None: WAL damage, to the end of `node`'s log) from a
        healthy replica and have `node` install them in place of its damaged file."""
        try:
            end = last + 1 if last is not None else await self._damaged_log_end(client)
            batches, source = await self._intact_copy(node, first, end)
            size = sum(len(b.arrow_ipc) for b in batches)
            if size > MAX_REPAIR_BYTES:
                raise Unavailable(
                    f"the range holds {size} bytes, more than {MAX_REPAIR_BYTES} repaired "
                    "online: `tamto storage repair` it with the node stopped"
                )
            aside = await client.repair_range(
                self.stream, self.partition, self.epoch, first, batches
            )
        except Exception as exc:  # tried again when the range is met again
            log.warning(
                "damaged replica not repaired yet",
                stream=self.stream,
                partition=self.partition,
                replica=node,
                offsets=f"{first}-{'' if last is None else last}",
                error=str(exc),
            )
            return
        self._damage_tried.pop((node, first), None)
        log.warning(
            "damaged replica repaired from a healthy one",
            stream=self.stream,
            partition=self.partition,
            replica=node,
            healthy=source,
            offsets=f"{first}-{end - 1}",
            damaged_file=aside,
        )

    async def _damaged_log_end(self, client: StorageClient) -> int:
        """Where a replica with WAL damage ends its log: it is repaired up to there, which
        must be durable on the log (never copy what was not acknowledged)."""
        end = (await client.open_partition(self.stream, self.partition, self.epoch)).next_offset
        if end > self.durable_offset:
            raise Unavailable(f"its log ends at {end}, past the durable end {self.durable_offset}")
        return end

    async def _intact_copy(self, node: str, first: int, end: int) -> tuple[list[Batch], str]:
        """The entries [`first`, `end`) as a replica other than `node` reads them from its
        own files, and which one."""
        for source, replica in self._other_replicas(node):
            try:
                batches = [
                    batch
                    async for part in read_entries(
                        replica,
                        self.stream,
                        self.partition,
                        first,
                        end,
                        what=f"repair of {node}",
                        from_cache=False,
                    )
                    for batch in part
                ]
            except TamtoError:
                continue
            return batches, source
        raise Unavailable(f"no other replica reads offsets {first}-{end - 1} intact")

    def lagging(self) -> list[str]:
        """The ensemble's replicas that take no appends now (replicated logs only)."""
        return [n for n in self.ensemble if self.replicas is not None and n not in self.replicas]

    def healing(self) -> dict[str, str]:
        """Why each lagging replica that is registered takes no appends yet: it is being
        caught up, or filled as a spare in place of a member that stayed down (with the
        last try's error, if it failed). Unregistered ones are down, not healing."""
        if self._client_for is None:
            return {}
        found: dict[str, str] = {}
        for node in self.lagging():
            if self._client_for(node) is None:
                continue
            old = self._replacing.get(node)
            reason = f"re-replicating in place of {old}" if old else "catching up"
            error = self.catch_up_errors.get(node)
            found[node] = f"{reason} (last try: {error})" if error else reason
        return found

    def _source(self) -> StorageClient:
        """A replica holding every durable entry: one that answered the last append."""
        assert self.replicas is not None
        return next((self.replicas[n] for n in self._fresh if n in self.replicas), self.storage)

    async def _repair_loop(self) -> None:
        """Catch up, every `REPAIR_INTERVAL_S`, each lagging replica that is registered."""
        assert self._client_for is not None
        down_since: dict[str, float] = {}
        #: Registered replicas whose copy diverged where it cannot be truncated (sealed).
        diverged_since: dict[str, float] = {}
        while self.failure is None:
            await asyncio.sleep(REPAIR_INTERVAL_S)  # a period, not a wait for a condition
            await self._record_replacements()
            for node in self.lagging():
                client = self._client_for(node)
                if client is None:
                    since = down_since.setdefault(node, time.monotonic())
                    if self._replace_after(since):
                        self._replace(node)
                    continue
                down_since.pop(node, None)
                if node in self._joiners:
                    continue
                try:
                    await self._catch_up(node, client)
                    self.catch_up_errors.pop(node, None)
                    diverged_since.pop(node, None)
                except Diverged as exc:  # it will never agree: replaced like a lost one
                    since = diverged_since.setdefault(node, time.monotonic())
                    if self._replace_after(since):
                        self._replace(node, "diverged")
                    elif self.catch_up_errors.get(node) != str(exc):
                        self.catch_up_errors[node] = str(exc)
                        log.warning(
                            "replica diverged in sealed data: replaced by a spare if it stays so",
                            stream=self.stream,
                            partition=self.partition,
                            replica=node,
                            error=str(exc),
                        )
                except Exception as exc:  # down still, or refusing: tried again later
                    if isinstance(exc, DataLoss):  # its copy is damaged: repair it
                        self.repair_damage(node, client, exc)
                    if self.catch_up_errors.get(node) != str(exc):  # each new reason once
                        self.catch_up_errors[node] = str(exc)
                        log.warning(
                            "replica not caught up yet",
                            stream=self.stream,
                            partition=self.partition,
                            replica=node,
                            error=str(exc),
                        )

    def _replace_after(self, since: float) -> bool:
        """Whether a member out since `since` (monotonic) is due for replacement."""
        return (
            self._rereplicate is not None and time.monotonic() - since >= self._rereplicate.after_s
        )

    def _replace(self, node: str, why: str = "down") -> None:
        """Put a spare storage node in the ensemble where `node` (down too long, or
        diverged for good) was; it is caught up from offset 0 like any lagging replica."""
        assert self._rereplicate is not None
        new = self._rereplicate.spare_for(self.ensemble)
        if new is None:
            self.catch_up_errors[node] = f"{why}, and no spare storage node to re-replicate to"
            return
        self.ensemble = tuple(new if n == node else n for n in self.ensemble)
        self._replacing[new] = self._replacing.pop(node, node)  # a spare that died too
        self.catch_up_errors.pop(node, None)
        log.warning(
            "re-replicating: a replica stayed down, copying the partition to a spare node",
            stream=self.stream,
            partition=self.partition,
            replica=node,
            spare=new,
        )

    async def _record_replacements(self) -> None:
        """Record in the ledgers each spare that takes appends now (retried until done)."""
        assert self.replicas is not None
        for new, old in list(self._replacing.items()):
            if new not in self.replicas or self._rereplicate is None:
                continue
            try:
                await self._rereplicate.record(old, new)
            except Exception as exc:
                log.warning(
                    "re-replication not recorded yet",
                    stream=self.stream,
                    partition=self.partition,
                    replica=old,
                    spare=new,
                    error=str(exc),
                )
                continue
            del self._replacing[new]
            log.info(
                "re-replicated: the spare holds the partition in place of the lost replica",
                stream=self.stream,
                partition=self.partition,
                replica=old,
                spare=new,
            )

    async def _catch_up(self, node: str, client: StorageClient) -> None:
        """Open the partition on `node` with this epoch and copy it the entries it lacks
        until it is within `JOIN_GAP` of the durable end; then hand it to the sender."""
        bounds = await client.open_partition(self.stream, self.partition, self.epoch)
        offset = bounds.next_offset
        if offset == bounds.start_offset:  # it holds nothing (a spare): nothing to agree on
            offset = await self._start_like_source(client, offset)
            agreed = offset
        else:
            agreed = await agreed_end(
                self._source(),
                client,
                self.stream,
                self.partition,
                min(offset, self.durable_offset),
            )
        if agreed < offset:
            # Entries past a recovered ledger's end (it missed that recovery; they
            # were never acknowledged): storage drops them for this epoch, unless
            # they are sealed there (then it stays out, retried every round).
            log.info(
                "replica holds entries the log does not have; truncating them",
                stream=self.stream,
                partition=self.partition,
                replica=node,
                replica_end=offset,
                agreed_end=agreed,
            )
            try:
                offset = await client.truncate(self.stream, self.partition, self.epoch, agreed)
            except FailedPrecondition as exc:
                if SEALED_REFUSAL in str(exc):  # storage never truncates sealed offsets
                    raise Diverged(
                        f"replica {node} diverges at {agreed} in sealed data: {exc}"
                    ) from exc
                raise
            if offset != agreed:
                raise Unavailable(f"replica {node} ends at {offset} after truncating to {agreed}")
        while self.durable_offset - offset > JOIN_GAP and self.failure is None:
            offset = await self._copy_to(node, client, offset)
        self._joiners[node] = (client, offset)
        self._wake.set()

    async def _start_like_source(self, client: StorageClient, offset: int) -> int:
        """Where the copy to an empty replica ending at `offset` starts: there, or,
        when it is empty at 0 and the source's log starts past 0 (retention), at the
        source's start, where storage makes it start, durably (`start_at`)."""
        start = await self._source().current_start(self.stream, self.partition, self.epoch)
        if offset != 0 or start <= 0:
            return offset
        bounds = await client.open_partition(self.stream, self.partition, self.epoch, start)
        return bounds.next_offset

    async def _copy_to(self, node: str, client: StorageClient, offset: int) -> int:
        """Copy `node`, whose log ends at `offset`, the durable entries it lacks."""
        return await copy_entries(
            self._source(),
            client,
            self.stream,
            self.partition,
            self.epoch,
            offset,
            self.durable_offset,
            what=f"catch-up of {node}",
        )

    async def _admit_joiners(self) -> None:
        """Between two appends (every entry sent is durable): copy each joiner the
        last entries it lacks and the cursors the replicas hold (`sync_cursors`), and
        make it a replica again."""
        assert self.replicas is not None
        for node, (client, offset) in list(self._joiners.items()):
            del self._joiners[node]
            try:
                await self._copy_to(node, client, offset)
                await sync_cursors(self.stream, self.partition, self.epoch, self.replicas, client)
            except Exception as exc:
                log.warning(
                    "replica not caught up",
                    stream=self.stream,
                    partition=self.partition,
                    replica=node,
                    error=str(exc),
                )
                continue
            self.replicas[node] = client
            log.info(
                "replica caught up; it takes appends again",
                stream=self.stream,
                partition=self.partition,
                replica=node,
                next_offset=self.durable_offset,
            )

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
