"""A partition: its write-ahead log, its owner epoch (fencing) and its cursors.

The files it keeps are laid out as `tamto_storage.partition_files` describes;
ownership (the epoch fencing), cursors and damage are `tamto_storage.owned_partition`'s.

Reads by offset are served by the WAL from its first batch on and by the
segments below that; sealing (`seal`) turns durable WAL batches into segments,
after which `trim_wal` may remove WAL files the segments fully cover (and,
once everything is sealed, start a fresh one so the last can go too). It keeps
the newest of those files up to a byte budget, the read tail: a consumer a
little behind then gets the batches as they were stored, with no Parquet to
decode and no Arrow IPC to encode again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import structlog

from tamto_common.durable import make_dirs
from tamto_common.errors import (
    DataLoss,
    FailedPrecondition,
    InvalidArgument,
    OutOfRange,
    Unavailable,
)
from tamto_common.message_traces import child_span, message_span
from tamto_protocol.segment import SegmentEntry
from tamto_storage import metrics
from tamto_storage.batch_checks import check_batches
from tamto_storage.epoch import load_epoch
from tamto_storage.model import PartitionId, ReadResult, StoredBatch
from tamto_storage.owned_partition import OwnedPartition
from tamto_storage.partition_files import (
    WAL_DIR,
    migrate_layout,
    remove_files,
    remove_sealed_wal_files,
)
from tamto_storage.quarantine import quarantine, quarantined, runs
from tamto_storage.recorded import reconcile_found
from tamto_storage.sealed_truncate_files import finish_interrupted
from tamto_storage.segment_log import SegmentLog
from tamto_storage.segment_reads import DecodedGroups
from tamto_storage.segments import Segment, choose_live, scan_segments, write_segment
from tamto_storage.wal import SealedFrameDamaged, Wal, WalOptions, create_wal_file
from tamto_storage.wal_index import WalFileSummary
from tamto_storage.wal_recovery import list_wal_files, wal_file_name

log = structlog.get_logger(__name__)

__all__ = ["WAL_DIR", "Partition", "remove_files"]

#: Attempts at a read whose file sealing or retention removed meanwhile.
_READ_ATTEMPTS = 3
#: The tracer of storage's data-path spans.
TRACER = "tamto.storage"


class Partition(OwnedPartition):
    """One partition's durable log. Create with `Partition.load`, stop with `close`."""

    @classmethod
    async def load(
        cls,
        pid: PartitionId,
        directory: Path,
        options: WalOptions,
        *,
        floor: int = 0,
        decoded_groups: DecodedGroups | None = None,
        recorded: Sequence[SegmentEntry] = (),
    ) -> Partition:
        """Open the partition stored in `directory` (created if missing), recovering its WAL.

        `floor` is the retention floor the stream's manifest records: segment
        files below it were expired and are not served (see `expired_files`).
        Segment reads keep decoded row groups in `decoded_groups` (shared by the
        store's partitions), if given. `recorded` are the partition's entries in
        the manifest: their digests (`tamto_storage.integrity`) carry over to the
        files found, and a file found damaged keeps its recorded entry.
        """
        await asyncio.to_thread(make_dirs, directory)
        await asyncio.to_thread(migrate_layout, directory)
        await asyncio.to_thread(finish_interrupted, directory)
        stored = await asyncio.to_thread(load_epoch, directory)
        found = await asyncio.to_thread(scan_segments, pid.partition, directory)
        found = await asyncio.to_thread(reconcile_found, directory, found, recorded)
        live, superseded = choose_live(found)
        kept = [s for s in live if s.first_offset >= floor]
        segments = SegmentLog(kept, floor, decoded_groups)
        # The read tail does not outlive a restart: checking it frame by frame would
        # make opening slower by its size, and damage there would stop the log.
        await asyncio.to_thread(remove_sealed_wal_files, directory / WAL_DIR, segments.end_offset)
        wal = await Wal.open(directory / WAL_DIR, options, label=str(pid))
        if wal.corruption is None and wal.next_offset < segments.end_offset:
            wal = await _restart_behind(pid, wal, segments.end_offset)
        # A lost or stale epoch file must not let an older owner back in.
        partition = cls(pid, directory, wal, max(stored, wal.max_epoch), segments)
        below = [s for s in live if s.first_offset < floor]
        partition.expired_files = [s.path for s in (*below, *superseded)]
        partition._unsealed_bytes = wal.bytes_from(partition._segments.end_offset)
        kept_aside = await asyncio.to_thread(quarantined, directory)
        metrics.QUARANTINED_BATCHES.labels(pid.stream).inc(len(kept_aside))
        partition.count_damage()
        return partition

    async def append(self, epoch: int, batches: Sequence[StoredBatch]) -> int:
        """Append contiguous batches; returns the next offset once all are fsynced.

        Offsets are reserved when called (before the first await), so concurrent
        appends are stored in call order.
        """
        check_batches(batches)
        self._wal.check_writable()
        self.check_epoch(epoch)
        next_offset = self._wal.next_offset
        if batches[0].base_offset != next_offset:
            raise FailedPrecondition(
                f"base offset {batches[0].base_offset} does not match "
                f"the partition's next offset {next_offset}"
            )
        ipcs = (b.arrow_ipc for b in batches)
        with message_span(
            TRACER, "tamto.storage.append", ipcs, self.id.stream, self.id.partition
        ) as span:
            # The group commit's; a lone append may write and fsync inside `append` itself.
            with child_span(TRACER, "tamto.storage.fsync", span):
                done = self._wal.append(batches, epoch)
                await asyncio.shield(done)
        self._unsealed_bytes += sum(len(b.arrow_ipc) for b in batches)
        if self._unsealed_since is None:
            self._unsealed_since = time.monotonic()
        stream = self.id.stream
        metrics.APPENDED_MESSAGES.labels(stream).inc(sum(b.count for b in batches))
        metrics.APPENDED_BYTES.labels(stream).inc(sum(len(b.arrow_ipc) for b in batches))
        return batches[-1].end_offset

    async def read(self, from_offset: int, max_messages: int, max_bytes: int) -> ReadResult:
        """Stored batches covering `from_offset` onwards (the first may start before it).

        `max_messages` 0 means no message limit; at least one batch is returned
        whenever one exists at or after `from_offset`, even beyond `max_bytes`.
        `next_offset` of the result is where the next read should start.
        """
        corruption = self._wal.corruption
        if corruption is not None and from_offset >= corruption.offset:
            raise corruption.error()
        if max_messages < 0:
            raise InvalidArgument(f"max_messages must not be negative, got {max_messages}")
        for _ in range(_READ_ATTEMPTS):
            next_offset = from_offset  # where the next read starts when nothing is found
            start, end = self._start_offset(), self._wal.next_offset
            if from_offset < start:
                raise OutOfRange(
                    f"offset {from_offset} is below the partition's start offset {start}"
                )
            if from_offset > end:
                raise InvalidArgument(f"offset {from_offset} is beyond the partition's end {end}")
            try:
                if from_offset >= self._wal.start_offset:
                    batches = await self._wal_read(from_offset, max_messages, max_bytes)
                else:
                    batches = await self._segments.read(from_offset, max_messages, max_bytes)
                    metrics.READ_BATCHES.labels("segments").inc(len(batches))
                    if not batches:
                        # Interest retention, or a repair's lost range, emptied the rest
                        # of the sealed range: the next read starts past it.
                        next_offset = wal_start = self._wal.start_offset
                        batches = await self._wal_read(wal_start, max_messages, max_bytes)
            except FileNotFoundError:
                continue  # sealing or retention removed the file meanwhile: route again
            except DataLoss:
                self.count_damage()
                raise
            return ReadResult(tuple(batches), batches[-1].end_offset if batches else next_offset)
        raise Unavailable(f"partition {self.id}: files kept disappearing under a read")

    async def _wal_read(
        self, from_offset: int, max_messages: int, max_bytes: int
    ) -> list[StoredBatch]:
        """Read the WAL; a damaged frame of the read tail is read from segments instead,
        and the tail goes (its data is sealed, so the log stays whole)."""
        sealed_end = self._segments.end_offset
        try:
            batches = await self._wal.read(
                from_offset, max_messages, max(max_bytes, 1), sealed_end=sealed_end
            )
        except SealedFrameDamaged as exc:
            log.warning(
                "read tail damaged, reading segments", partition=str(self.id), error=str(exc)
            )
            await self.trim_wal()
            batches = await self._segments.read(from_offset, max_messages, max_bytes)
            metrics.READ_BATCHES.labels("segments").inc(len(batches))
            return batches
        from_tail = sum(1 for b in batches if b.end_offset <= sealed_end)
        metrics.READ_BATCHES.labels("tail").inc(from_tail)
        metrics.READ_BATCHES.labels("wal").inc(len(batches) - from_tail)
        return batches

    async def offset_for_time(self, time_us: int) -> int:
        """The first offset published at or after `time_us`, sealed or not.

        The log's durable end when nothing is that recent.
        """
        sealed = await self._segments.offset_for_time(time_us)
        if sealed is not None:
            return sealed
        offset = self._wal.offset_for_time(time_us)
        return max(offset, self._start_offset())

    @property
    def unsealed_bytes(self) -> int:
        """Bytes of durable batches not sealed into segments yet."""
        return self._unsealed_bytes

    def seal_due(self, now: float, segment_bytes: int, max_age_s: float) -> bool:
        """Whether unsealed durable data is big enough or old enough to seal."""
        if self._wal.durable_offset <= self._segments.end_offset or self._unsealed_since is None:
            return False
        return self._unsealed_bytes >= segment_bytes or now - self._unsealed_since >= max_age_s

    async def seal(self, segment_bytes: int) -> list[Segment]:
        """Turn every durable, unsealed batch into segments of about `segment_bytes`.

        Each segment is visible (renamed into place) when this returns; the
        caller records them in the manifest and only then calls `trim_wal`.
        Segments end on batch boundaries; one batch larger than `segment_bytes`
        is a segment of its own.
        """
        async with self._seal_lock:
            started = time.monotonic()
            target = self._wal.durable_offset
            corruption = self._wal.corruption
            if corruption is not None:
                target = min(target, corruption.offset)
            written: list[Segment] = []
            while self._segments.end_offset < target:
                start = self._segments.end_offset
                if start < self._wal.start_offset:
                    raise DataLoss(
                        f"partition {self.id}: sealed log ends at {start} but the WAL "
                        f"starts at {self._wal.start_offset}"
                    )
                batches = await self._wal.read(start, 0, segment_bytes)
                batches = [b for b in batches if b.end_offset <= target]
                if not batches:
                    break
                for segment in await asyncio.to_thread(self.write_segments, batches):
                    self._segments.add(segment)
                    written.append(segment)
                self._unsealed_bytes -= sum(len(b.arrow_ipc) for b in batches)
            if self._wal.durable_offset <= self._segments.end_offset:
                self._unsealed_since = None
                self._unsealed_bytes = 0
            elif written:
                self._unsealed_since = started
            return written

    def write_segments(self, batches: Sequence[StoredBatch]) -> list[Segment]:
        """The segments for contiguous `batches` (blocking): a batch that cannot be
        sealed is quarantined and sealed past (`tamto_storage.quarantine`), so one
        bad batch never stops its partition's, or the node's, sealing."""
        return [
            write_segment(self.id.partition, self._dir, run)
            if reason is None
            else quarantine(self.id, self._dir, run[0], reason)
            for run, reason in runs(batches)
        ]

    def quarantined(self) -> list[str]:
        """The offsets (``<first>-<last>``) of the batches quarantined so far (blocking)."""
        return quarantined(self._dir)

    def sealed_wal_files(self) -> list[WalFileSummary]:
        """The WAL files the committed segments fully cover (the read tail), oldest first."""
        return self._wal.sealed_files(self._segments.end_offset)

    async def trim_wal(self, keep_bytes: int = 0) -> int:
        """Remove WAL files the committed segments fully cover, but for the newest of
        them that fit in `keep_bytes` (the read tail); returns how many went.

        Files wholly below the partition's floor (expired by retention) go
        whatever the budget. Files from `wal_keep_from` on stay (the segment
        store has not committed them). When every stored batch is sealed, appends move to
        a fresh (empty) file first, so the last file can go too: with no tail,
        sealed data then takes no WAL space, and the empty file's name still
        records the log's next offset.
        """
        end = self._segments.end_offset
        successor = self._wal.roll(end)
        if successor is not None:
            await asyncio.to_thread(create_wal_file, successor)
            self._rolled_to = successor
        else:
            successor = self._rolled_to
        cut = max(self._wal.sealed_tail_start(end, keep_bytes), self._segments.floor)
        if self.wal_keep_from is not None:
            cut = min(cut, self.wal_keep_from)
        dropped = self._wal.drop_files_before(min(cut, end), successor=successor)
        if dropped:
            await asyncio.to_thread(remove_files, dropped)
        return len(dropped)

    async def restart_wal(self, end: int, set_aside: Callable[[Path], Path]) -> Path:
        """Start the damaged WAL again, empty, at `end`, once a repair from a healthy
        replica sealed every offset below it (`tamto_storage.replica_repair`; the
        caller holds the seal lock): the damaged file goes through `set_aside` (kept
        as evidence), the other WAL files go. Returns where the damaged file went."""
        corruption = self._wal.corruption
        if corruption is None or self._segments.end_offset != end:
            raise FailedPrecondition(
                f"partition {self.id}: the WAL restarts at {end} only after WAL damage "
                f"and once sealed there (sealed to {self._segments.end_offset})"
            )
        options = self._wal.options
        await self._wal.close()
        wal_dir = self._dir / WAL_DIR
        others = [p for _, p in list_wal_files(wal_dir) if p != corruption.file]
        aside = await asyncio.to_thread(set_aside, corruption.file)
        await asyncio.to_thread(remove_files, others)
        await asyncio.to_thread(create_wal_file, wal_dir / wal_file_name(end))
        self._wal = await Wal.open(wal_dir, options, label=str(self.id))
        self._rolled_to = None
        self._unsealed_bytes = 0
        self._unsealed_since = None
        return aside

    async def end_log_at(self, next_offset: int) -> None:
        """Make the WAL end at `next_offset`, for a sealed truncation (`tamto_storage.
        sealed_truncate`, which holds the seal lock and checked what goes): cut there
        while the WAL holds that offset, started again, empty, there otherwise."""
        if self._wal.start_offset <= next_offset:
            self._wal.truncate(next_offset)
        else:
            self._wal = await _restart_wal_at(self.id, self._wal, next_offset)
            self._rolled_to = None
        self._unsealed_bytes = 0
        self._unsealed_since = None

    def expire(self, now_us: int, retention_ms: int, retention_bytes: int) -> list[Segment]:
        """Drop the oldest segments that retention no longer keeps; returns them.

        Whole segments only. Time: a segment goes once its newest message is
        older than `retention_ms`. Size: oldest segments go while the sealed
        bytes exceed `retention_bytes`. 0 disables either rule. The caller
        records the drop in the manifest and deletes the files after a grace period.
        """
        expired: list[Segment] = []
        size = self._segments.size_bytes
        while self._segments.segments:
            oldest = self._segments.segments[0]
            too_old = retention_ms > 0 and (
                oldest.entry.max_publish_time_us < now_us - retention_ms * 1000
            )
            too_big = retention_bytes > 0 and size > retention_bytes
            if not (too_old or too_big):
                break
            expired.append(self._segments.remove_first())
            size -= oldest.entry.size_bytes
        return expired


async def _restart_behind(pid: PartitionId, wal: Wal, sealed_end: int) -> Wal:
    """A WAL ending below the sealed log's end lost its newer files (their place in
    the directory, or the whole directory); every frame it still holds is sealed. It
    starts again, empty, at that end, so no append takes an offset a segment holds.
    The unsealed offsets those files held are gone without a trace here: logged as an
    error (`tamto storage verify`, run before a start, reports it)."""
    log.error(
        "wal ends below the sealed log, started again after it",
        partition=str(pid),
        wal_end=wal.next_offset,
        sealed_end=sealed_end,
    )
    return await _restart_wal_at(pid, wal, sealed_end)


async def _restart_wal_at(pid: PartitionId, wal: Wal, end: int) -> Wal:
    """`wal` started again, empty, at `end` (its files go)."""
    options = wal.options
    await wal.close()
    directory = wal.directory
    target = directory / wal_file_name(end)
    others = [path for _, path in list_wal_files(directory) if path != target]
    await asyncio.to_thread(create_wal_file, target)
    await asyncio.to_thread(remove_files, others)
    return await Wal.open(directory, options, label=str(pid))
