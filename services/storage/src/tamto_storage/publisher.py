"""Publishing sealed segments into the cluster's segment store, one replica per partition.

Every replica of a partition seals its WAL into local segments as before (they
serve its reads and are its copy until the store has them). One replica, the
*publisher*, also commits them to the cluster's `SegmentStore`: the first
member of the partition's current ledger ensemble that is registered (alive)
in etcd. Every node reads the same ledger list and membership, so they agree
without talking to each other; when the publisher dies its registration
expires and the next member of the ensemble takes over where the store ends.

Exactly one segment per offset range: the publisher always continues at the
store's committed end (`SegmentStore.committed_end`, read from the store, not
remembered), so the store's segments of a partition are contiguous and never
overlap. Where that end is a local segment's first offset, the local file is
committed as it is (same name, same bytes: a retry, or a second node sealing
the same batches, writes the same object); where it falls inside one (the
publisher changed and the nodes sealed at different points), the rest of that
segment is written as a new segment from the same rows, `build_table` and
`write_parquet` being deterministic.

The WAL stays until the store has the offsets: every replica, publisher or
not, keeps its WAL files from the store's committed end on
(`Partition.wal_keep_from`), so nothing acknowledged depends on a store
upload that has not happened. A store that cannot be reached (S3 down) is
logged (once, and once when it is back) and counted
(``tamto_storage_store_errors_total``); it is tried again a second later, for
one partition at a time until it answers: the WAL grows meanwhile, consumers
read from the replicas as before.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, BinaryIO

import structlog

from tamto_common.errors import DataLoss
from tamto_protocol.segment import SegmentEntry, segment_file_name
from tamto_storage import segments as seg
from tamto_storage.integrity import DigestingSink, VerifiedFiles
from tamto_storage.metrics import STORE_ERRORS, STORE_SEGMENTS
from tamto_storage.model import PartitionId
from tamto_storage.partition import Partition
from tamto_storage.segment_reads import read_rows, to_stored_batches
from tamto_storage.segment_store import SegmentStore, StoredSegment, overlapped
from tamto_storage.segments import Segment
from tamto_storage.store_cache import StoreCache, reclaim_committed, reclaimable
from tamto_storage.store_manifest import StoreManifests

if TYPE_CHECKING:  # pyiceberg (with pandas and SQLAlchemy) only where a catalog is set
    from tamto_storage.iceberg import IcebergTables

log = structlog.get_logger(__name__)

#: Whether this node publishes (stream, partition) to the store.
Designated = Callable[[str, int], Awaitable[bool]]

#: Read-back limit for rewriting the rest of a segment (segments are bounded anyway).
_ALL_BYTES = 1 << 62


class Publisher:
    """Commits a node's sealed segments to the store when it is a partition's publisher."""

    def __init__(
        self,
        store: SegmentStore,
        designated: Designated,
        tables: IcebergTables | None = None,
        cache: StoreCache | None = None,
        retention_grace_s: float = 0.0,
    ) -> None:
        """`tables`: the streams' Iceberg tables each committed segment is added to;
        `cache`: where reads of reclaimed segments fetch the store's objects (None: local
        copies are kept); `retention_grace_s`: how long an object retention removed from
        the store's manifest and the table stays in the store."""
        self._store = store
        self._cache = cache
        self.retention_grace_s = retention_grace_s
        #: Per partition, the retention floor last applied to the store.
        self._floors: dict[PartitionId, int] = {}
        #: Objects retention removed, by (partition, name): when they are deleted (wall
        #: clock, s), as the store's manifest records it.
        self._doomed: dict[tuple[PartitionId, str], float] = {}
        self._manifests = StoreManifests(store)
        self._designated = designated
        self._tables = tables
        #: Where each partition's segments in its Iceberg table end, as far as this
        #: node has to care (a partition it does not publish: the store's end).
        self._table_ends: dict[PartitionId, int] = {}
        self._verified = VerifiedFiles()
        #: Per partition, the offset it could not publish from (logged once).
        self._stuck: dict[PartitionId, int] = {}
        #: The store's committed end per partition, as last read or written.
        self._ends: dict[PartitionId, int] = {}
        self._unreachable = False
        #: While unreachable, the monotonic time of the next try (one try per round at
        #: most: each can take seconds of the client's own retries).
        self._retry_at = 0.0
        self.retry_interval_s = 1.0

    @property
    def store(self) -> SegmentStore:
        return self._store

    @property
    def tables(self) -> IcebergTables | None:
        return self._tables

    def forget(self, stream: str) -> None:
        """Drop what this node remembers of a deleted stream, and its cached objects."""
        for state in (self._floors, self._table_ends, self._stuck, self._ends):
            for pid in [p for p in state if p.stream == stream]:
                del state[pid]
        for key in [k for k in self._doomed if k[0].stream == stream]:
            del self._doomed[key]
        self._manifests.forget(stream)
        if self._cache is not None:
            self._cache.forget(stream)

    def committed_end(self, pid: PartitionId) -> int | None:
        """The store's committed end of `pid` as this node last saw it."""
        return self._ends.get(pid)

    def attach(self, partition: Partition) -> None:
        """Serve `partition`'s segments whose local file was reclaimed from the store."""
        cache, pid = self._cache, partition.id
        if cache is not None:
            partition.segment_log.serve_missing_from(lambda segment: cache.path(pid, segment))

    async def publish(self, partition: Partition) -> None:
        """Bring the store up to this node's sealed end of `partition` (if it is the
        publisher), keep the WAL from the store's committed end on, and reclaim the
        local copies the store holds (with a cache to read them back through)."""
        pid = partition.id
        local_end = partition.segment_log.end_offset
        known = self._ends.get(pid)
        due = known is None or known < local_end or self._table_behind(pid)
        due = due or self._retention_due(partition)
        if due and time.monotonic() >= self._retry_at:
            try:
                committed = await self._round(partition)
                if self._cache is not None:
                    doomed = reclaimable(partition.segment_log.segments, committed)
                    await asyncio.to_thread(reclaim_committed, pid, doomed)
            except OSError as exc:  # the store is unreachable: the WAL keeps it all
                self._failed(pid, exc)
            else:
                if self._unreachable:
                    log.info("segment store reachable again", store=self._store.uri)
                    self._unreachable = False
                if committed:
                    self._ends[pid] = committed[-1].end_offset
        floor = partition.segment_log.start_offset
        keep = self._ends.get(pid, floor if floor is not None else local_end)
        partition.wal_keep_from = keep

    async def _round(self, partition: Partition) -> list[StoredSegment]:
        """One look at the store for `partition`: as the publisher, commit what it lacks,
        list it in the store's manifest and the Iceberg table; its committed segments."""
        pid = partition.id
        committed = await asyncio.to_thread(self._store.committed, pid.stream, pid.partition)
        end = committed[-1].end_offset if committed else None
        floor = partition.segment_log.floor
        if not await self._designated(pid.stream, pid.partition):
            if end is not None:
                self._table_ends[pid] = end  # the publisher's to add
            self._floors[pid] = floor
            return committed
        known: dict[str, SegmentEntry] = {}
        if await self._catch_up(partition, end, known) != end:
            committed = await asyncio.to_thread(self._store.committed, pid.stream, pid.partition)
            end = committed[-1].end_offset if committed else None
        live = [s for s in committed if s.end_offset > floor]
        await asyncio.to_thread(self._manifests.sync, pid, live, known, floor or None)
        await self._add_to_table(pid, end)
        await self._expire(pid, committed[: len(committed) - len(live)], floor)
        return committed

    def _retention_due(self, partition: Partition) -> bool:
        """Whether retention moved `partition`'s floor, or an expired object's grace ended."""
        pid, now = partition.id, time.time()
        if partition.segment_log.floor > self._floors.get(pid, 0):
            return True
        return any(key[0] == pid and at <= now for key, at in self._doomed.items())

    async def _expire(self, pid: PartitionId, expired: list[StoredSegment], floor: int) -> None:
        """Apply retention to the store: objects below the floor leave the Iceberg table
        (whole files), and the store once `retention_grace_s` has passed (the manifest
        no longer lists them: `_round`)."""
        if expired and self._tables is not None:
            try:
                await asyncio.to_thread(self._tables.remove, pid.stream, pid.partition, floor)
            except Exception as exc:  # the catalog failed: the next round tries again
                log.warning("Iceberg table not updated", partition=str(pid), error=str(exc))
                return
        now = time.time()
        default_us = int((now + self.retention_grace_s) * 1e6)
        names = {segment_file_name(s.first_offset, s.last_offset): default_us for s in expired}
        # The deadlines are kept in the store's manifest: a restart, or another publisher,
        # does not extend them (and the list follows the objects still there).
        deadlines = await asyncio.to_thread(self._manifests.expiring, pid, names)
        for name, at_us in deadlines.items():
            self._doomed.setdefault((pid, name), at_us / 1e6)
        gone = set()
        for key, at in list(self._doomed.items()):
            if key[0] == pid and at <= now:
                await asyncio.to_thread(self._store.delete, pid.stream, pid.partition, key[1])
                del self._doomed[key]
                gone.add(key[1])
                log.info(
                    "expired segment removed from the store", partition=str(pid), segment=key[1]
                )
        if gone:  # the manifest's list follows
            left = {name: at for name, at in deadlines.items() if name not in gone}
            await asyncio.to_thread(self._manifests.expiring, pid, left)
        self._floors[pid] = floor

    def _table_behind(self, pid: PartitionId) -> bool:
        known = self._ends.get(pid)
        return (
            self._tables is not None
            and known is not None
            and (self._table_ends.get(pid, -1) < known)
        )

    async def _add_to_table(self, pid: PartitionId, end: int | None) -> None:
        """Add the store's segments of `pid` that its Iceberg table lacks (if there is one).
        A catalog that fails is logged and tried again next round: the store is the truth."""
        if self._tables is None or end is None or self._table_ends.get(pid, -1) >= end:
            return
        committed = await asyncio.to_thread(self._store.committed, pid.stream, pid.partition)
        try:
            await asyncio.to_thread(self._tables.append, pid.stream, pid.partition, committed)
        except Exception as exc:  # the catalog (SQL, or its files in the store) failed
            log.warning("Iceberg table not updated", partition=str(pid), error=str(exc))
            return
        self._table_ends[pid] = end

    def _failed(self, pid: PartitionId, exc: OSError) -> None:
        STORE_ERRORS.inc()
        self._retry_at = time.monotonic() + self.retry_interval_s
        if not self._unreachable:
            log.warning(
                "segment store unreachable; the WAL is kept until it returns",
                store=self._store.uri,
                partition=str(pid),
                error=str(exc),
            )
        self._unreachable = True

    async def _catch_up(
        self, partition: Partition, end: int | None, known: dict[str, SegmentEntry] | None = None
    ) -> int | None:
        """Commit local segments from the store's `end` on; returns the new end.
        `known` gets the manifest entry of each object committed, by name."""
        known = {} if known is None else known
        local = partition.segment_log
        start = end if end is not None else local.start_offset
        while start is not None and start < local.end_offset:
            segment = local.covering(start)
            if segment is None or segment.damage or segment.generation:
                # Below this node's log, damaged, or rewritten by interest retention:
                # another replica (or a repair) has to provide the range. Said once.
                if self._stuck.get(partition.id) != start:
                    self._stuck[partition.id] = start
                    log.warning(
                        "segment not published",
                        partition=str(partition.id),
                        offset=start,
                        why="damaged" if segment and segment.damage else "not held as sealed",
                    )
                return end
            name, entry = await asyncio.to_thread(self._commit, partition.id, segment, start)
            known[name] = entry
            STORE_SEGMENTS.inc()
            log.info("segment published", partition=str(partition.id), segment=name)
            if await asyncio.to_thread(self._resolve_overlaps, partition.id, name):
                return None  # it lost to another publisher's: the next round reads the end
            start = end = segment.end_offset
        return end

    def _resolve_overlaps(self, pid: PartitionId, mine: str) -> bool:
        """Delete the segments that overlap another (two nodes published at once, each
        believing it was the publisher); True when `mine` was one of them (blocking)."""
        losers = overlapped(self._store.committed(pid.stream, pid.partition))
        for loser in losers:
            name = segment_file_name(loser.first_offset, loser.last_offset)
            log.warning(
                "overlapping segment removed from the store", partition=str(pid), segment=name
            )
            self._store.delete(pid.stream, pid.partition, name)
        return any(segment_file_name(s.first_offset, s.last_offset) == mine for s in losers)

    def _commit(self, pid: PartitionId, segment: Segment, start: int) -> tuple[str, SegmentEntry]:
        """Commit `segment` from offset `start` to the store; returns its name and
        manifest entry (blocking)."""
        problem = self._verified.check(segment.path, segment.entry.digest)
        if problem is not None:
            raise DataLoss(problem)
        if start == segment.first_offset:
            self._store.put_file(pid.stream, pid.partition, segment.path.name, segment.path)
            return segment.path.name, segment.entry
        rows = read_rows(segment.path, start, 0, _ALL_BYTES)
        table = seg.build_table(to_stored_batches(rows)).combine_chunks()
        name = segment_file_name(start, segment.last_offset)

        written: list[tuple[str, int]] = []

        def write(out: BinaryIO) -> None:
            sink = DigestingSink(out)
            seg.write_parquet(table, sink)  # type: ignore[arg-type]  # file-like enough
            written.append((sink.digest, out.tell()))

        self._store.put(pid.stream, pid.partition, name, write)
        digest, size = written[-1]
        metadata = table.schema.metadata or {}
        return name, seg.segment_entry(pid.partition, metadata, size, table.num_rows, digest=digest)
