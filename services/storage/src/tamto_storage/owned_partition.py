"""A partition's state and who may change it: the owner epoch, cursors, damage.

Fencing: `open(epoch)` claims the partition for an owner epoch; appends and
cursor commits must carry exactly the current epoch, so a router that lost
ownership (older epoch) cannot write, and a new owner must open before writing.
The current owner alone may also move the log's ends for a recovered ledger
(`truncate`, `start_at`).

`tamto_storage.partition.Partition` builds on this with the data path (append,
read) and sealing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import structlog

from tamto_common.errors import FailedPrecondition, InvalidArgument
from tamto_storage import metrics
from tamto_storage.cursors import CursorStore
from tamto_storage.epoch import store_epoch
from tamto_storage.model import Cursor, PartitionId, PartitionOffsets
from tamto_storage.partition_files import CURSORS_DIR, WAL_DIR, files_bytes
from tamto_storage.segment_log import SegmentLog
from tamto_storage.wal import Wal

log = structlog.get_logger(__name__)


class OwnedPartition:
    """A partition's WAL, segments, owner epoch and cursors (see the module's docstring)."""

    def __init__(
        self,
        pid: PartitionId,
        directory: Path,
        wal: Wal,
        epoch: int,
        segments: SegmentLog | None = None,
    ) -> None:
        self.id = pid
        self._dir = directory
        self._wal = wal
        self._segments = segments if segments is not None else SegmentLog([])
        self._seal_lock = asyncio.Lock()
        # The empty WAL file the last roll created durably: while appends go to it,
        # a later trim may drop the file before it (kept then as read tail).
        self._rolled_to: Path | None = None
        #: WAL files holding offsets at or after this one stay, whatever is sealed here:
        #: the cluster's segment store has not committed them yet (None: no store).
        self.wal_keep_from: int | None = None
        #: Segment files found at load below the retention floor, or superseded by a
        #: carried-forward rewrite, still to be deleted.
        self.expired_files: list[Path] = []
        self._unsealed_bytes = 0
        self._unsealed_since: float | None = None  # time.monotonic() of the oldest unsealed ack
        if wal.durable_offset > self._segments.end_offset:
            self._unsealed_since = time.monotonic()
        self._epoch = epoch  # durable: appends with exactly this epoch are accepted
        self._fence = epoch  # >= _epoch: an open in progress already fences older epochs
        self._epoch_lock = asyncio.Lock()
        self._cursors = CursorStore(directory / CURSORS_DIR)
        self._damage_shown = False  # whether the damaged-files gauge has this partition

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def segment_log(self) -> SegmentLog:
        """The committed segments."""
        return self._segments

    @property
    def epoch(self) -> int:
        """The current owner epoch."""
        return self._epoch

    @property
    def wal(self) -> Wal:
        """The partition's write-ahead log."""
        return self._wal

    def offsets(self) -> PartitionOffsets:
        """Where the log starts (segments included) and where the next append must start.

        With a damaged WAL the end is where the frames that still check out
        after the damage end (at least one past the first damaged offset):
        acknowledged messages lie beyond the damage, so a reader (the router's
        delivery, which reads up to the end) must reach it and get DATA_LOSS,
        not wait in silence at its start, and the end must not move back below
        what was acknowledged. Appends are refused there anyway.
        """
        end = self._wal.next_offset
        corruption = self._wal.corruption
        if corruption is not None:
            end = max(end, corruption.offset + 1, corruption.known_end or 0)
        return PartitionOffsets(self._start_offset(), end)

    def _start_offset(self) -> int:
        wal_start = min(max(self._wal.start_offset, self._segments.floor), self._wal.next_offset)
        sealed_start = self._segments.start_offset
        return wal_start if sealed_start is None else min(sealed_start, wal_start)

    async def open(self, epoch: int) -> PartitionOffsets:
        """Claim the partition for `epoch` (>= the current one); return its offsets.

        A damaged WAL does not stop the claim: the offsets below the damage stay
        readable (the log's end is where the damage starts), while appends are
        refused with DATA_LOSS until `tamto storage repair` (see `damage`).
        """
        if epoch < 0:
            raise InvalidArgument(f"epoch must not be negative, got {epoch}")
        async with self._epoch_lock:
            if epoch < self._fence:
                raise FailedPrecondition(f"stale epoch {epoch} < current {self._fence}")
            if epoch > self._epoch:
                # Fence first: while the new epoch is being made durable neither
                # the old owner nor the new one may append.
                self._fence = epoch
                await asyncio.to_thread(store_epoch, self._dir, epoch)
                self._epoch = epoch
        return self.offsets()

    async def fence(self, epoch: int) -> int:
        """Fence the partition's ledger for a new owner's recovery; the last offset stored.

        The same fence as `open`: appends of epochs older than `epoch` are refused
        from now on. It answers once every append accepted before the fence is
        fsynced or failed, so the offset it gives is on disk here (with a failed
        WAL write: the durable end; with a damaged WAL: `offsets`' end, see there).
        """
        await self.open(epoch)
        await self._wal.settled()
        if self._wal.corruption is not None:
            return self.offsets().next_offset - 1
        return self._wal.durable_offset - 1

    async def truncate(self, epoch: int, next_offset: int) -> int:
        """Drop the WAL's batches from `next_offset` on; the log's end afterwards.

        For a replica that kept entries past a recovered ledger's end (docs/cluster.md
        section 2): only the current owner (`epoch`, the partition's epoch) may, only
        entries older owners wrote (one written with `epoch` belongs to the current
        ledger), never sealed offsets, and only at a batch boundary. At or past the
        end it changes nothing.
        """
        self.check_epoch(epoch)
        if next_offset < 0:
            raise InvalidArgument(f"next_offset must not be negative, got {next_offset}")
        async with self._seal_lock:  # no segment is written from what is dropped
            await self._wal.settled()
            self.check_epoch(epoch)  # a newer owner may have opened meanwhile
            end = self._wal.next_offset
            if next_offset >= end:
                return end
            sealed_end = max(self._segments.end_offset, self._wal.start_offset)
            if next_offset < sealed_end:
                raise FailedPrecondition(
                    f"cannot truncate {self.id} to {next_offset}: offsets below {sealed_end} "
                    "are sealed"
                )
            own = [e for e in self._wal.entries_from(next_offset) if e.epoch >= epoch]
            if own:
                raise FailedPrecondition(
                    f"cannot truncate {self.id} to {next_offset}: offset {own[0].base_offset} "
                    f"was written with the current epoch {epoch}"
                )
            dropped = self._wal.truncate(next_offset)
        self._unsealed_bytes = max(0, self._unsealed_bytes - sum(e.body_length for e in dropped))
        if self._wal.durable_offset <= self._segments.end_offset:
            self._unsealed_since = None
            self._unsealed_bytes = 0
        log.warning(
            "truncated the log's tail for its owner",
            partition=str(self.id),
            epoch=epoch,
            next_offset=next_offset,
            dropped_batches=len(dropped),
        )
        return self._wal.next_offset

    async def start_at(
        self, epoch: int, offset: int, record_floor: Callable[[], Awaitable[None]]
    ) -> PartitionOffsets:
        """Make this empty partition start at `offset` instead of 0; its offsets after.

        For a spare replica that receives a copy of a partition whose start
        retention moved past 0 (re-replication, docs/cluster.md section 2). Only
        the current owner (`epoch`), only while the partition holds no entry and
        no segment; starting again at the same offset changes nothing. Durable:
        `record_floor` records `offset` as the partition's floor in the stream's
        manifest first (as retention does), then the WAL is made to start there
        (`Wal.start_at`), so a restart in between leaves an empty log the copy
        starts again.
        """
        self.check_epoch(epoch)
        if offset < 0:
            raise InvalidArgument(f"start offset must not be negative, got {offset}")
        async with self._seal_lock:
            await self._wal.settled()
            self.check_epoch(epoch)  # a newer owner may have opened meanwhile
            if self._wal.next_offset == offset and self._segments.start_offset is None:
                return self.offsets()
            if self._wal.next_offset != 0 or self._segments.start_offset is not None:
                raise FailedPrecondition(
                    f"partition {self.id} holds offsets up to {self._wal.next_offset}: "
                    f"only an empty partition can start at offset {offset}"
                )
            await record_floor()
            self._segments.floor = offset
            self._wal.start_at(offset)
        log.info("empty partition starts past 0", partition=str(self.id), start_offset=offset)
        return self.offsets()

    def check_epoch(self, epoch: int) -> None:
        if epoch < self._fence:
            raise FailedPrecondition(f"stale epoch {epoch} < current {self._fence}")
        if epoch > self._epoch:
            raise FailedPrecondition(
                f"epoch {epoch} is newer than the partition's epoch {self._epoch}: "
                "open the partition first"
            )

    def damage(self) -> list[str]:
        """What this partition knows to be damaged (WAL and segments), one line each."""
        found = [f"{path}: {reason}" for path, reason in self._segments.damaged.items()]
        if self._wal.corruption is not None:
            found.append(str(self._wal.corruption.error()))
        return found

    def count_damage(self) -> None:
        """Show what is known damaged in the `tamto_storage_damaged_files` gauge
        (`tamto status` reads it)."""
        damaged = len(self.damage())
        if damaged or self._damage_shown:  # no series for the (many) partitions never damaged
            metrics.DAMAGED_FILES.labels(self.id.stream, str(self.id.partition)).set(damaged)
            self._damage_shown = True

    async def commit_cursor(
        self, epoch: int, subscription: str, cursor: Cursor, replace: bool = False
    ) -> None:
        """Durably store a subscription's cursor, if `epoch` is the current owner's
        (merged with the stored one unless `replace`: see `CursorStore.commit`)."""
        self.check_epoch(epoch)
        await self._cursors.commit(subscription, cursor, replace)

    async def delete_cursor(self, epoch: int, subscription: str) -> bool:
        """Remove a subscription's cursor, if `epoch` is the current owner's."""
        self.check_epoch(epoch)
        return await self._cursors.delete(subscription)

    async def cursor_names(self) -> list[str]:
        """The subscriptions with a cursor on this partition, sorted."""
        return await self._cursors.names()

    async def disk_bytes(self) -> tuple[int, int]:
        """Bytes on disk of the WAL files and of the sealed segments."""
        wal = await asyncio.to_thread(files_bytes, self._dir / WAL_DIR)
        return wal, self._segments.size_bytes

    async def get_cursor(self, subscription: str) -> Cursor | None:
        """The subscription's cursor, or None when none was committed."""
        return await self._cursors.get(subscription)

    async def cursors(self) -> dict[str, Cursor]:
        """Every subscription's cursor on this partition (see `CursorStore.all`)."""
        return await self._cursors.all()

    @property
    def seal_lock(self) -> asyncio.Lock:
        """Held while the sealed log changes (sealing, carrying messages forward)."""
        return self._seal_lock

    async def close(self) -> None:
        """Flush queued appends and stop the WAL writer."""
        await self._wal.close()
