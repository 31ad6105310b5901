"""A partition: its write-ahead log, its owner epoch (fencing) and its cursors.

Layout under ``<data-dir>/streams/<stream>/partition=<p>/``: ``wal/`` (see
`tamto_storage.wal`), ``epoch`` (see `tamto_storage.epoch`) and ``cursors/``
(see `tamto_storage.cursors`).

Fencing: `open(epoch)` claims the partition for an owner epoch; appends and
cursor commits must carry exactly the current epoch, so a router that lost
ownership (older epoch) cannot write, and a new owner must open before writing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from tamto_common.errors import FailedPrecondition, InvalidArgument
from tamto_storage import metrics
from tamto_storage.cursors import CursorStore
from tamto_storage.durable import make_dirs
from tamto_storage.epoch import load_epoch, store_epoch
from tamto_storage.frame import MAX_BODY_BYTES
from tamto_storage.model import Cursor, PartitionId, PartitionOffsets, ReadResult, StoredBatch
from tamto_storage.wal import Wal, WalOptions

MAX_BATCH_COUNT = 0xFFFFFFFF


class Partition:
    """One partition's durable log. Create with `Partition.load`, stop with `close`."""

    def __init__(self, pid: PartitionId, directory: Path, wal: Wal, epoch: int) -> None:
        self.id = pid
        self._dir = directory
        self._wal = wal
        self._epoch = epoch  # durable: appends with exactly this epoch are accepted
        self._fence = epoch  # >= _epoch: an open in progress already fences older epochs
        self._epoch_lock = asyncio.Lock()
        self._cursors = CursorStore(directory / "cursors")

    @classmethod
    async def load(cls, pid: PartitionId, directory: Path, options: WalOptions) -> Partition:
        """Open the partition stored in `directory` (created if missing), recovering its WAL."""
        await asyncio.to_thread(make_dirs, directory)
        stored = await asyncio.to_thread(load_epoch, directory)
        wal = await Wal.open(directory / "wal", options, label=str(pid))
        # A lost or stale epoch file must not let an older owner back in.
        return cls(pid, directory, wal, max(stored, wal.max_epoch))

    @property
    def epoch(self) -> int:
        """The current owner epoch."""
        return self._epoch

    @property
    def wal(self) -> Wal:
        """The partition's write-ahead log."""
        return self._wal

    def offsets(self) -> PartitionOffsets:
        """Where the log starts and where the next append must start."""
        return PartitionOffsets(self._wal.start_offset, self._wal.next_offset)

    async def open(self, epoch: int) -> PartitionOffsets:
        """Claim the partition for `epoch` (>= the current one); return its offsets."""
        if epoch < 0:
            raise InvalidArgument(f"epoch must not be negative, got {epoch}")
        async with self._epoch_lock:
            if epoch < self._fence:
                raise FailedPrecondition(f"stale epoch {epoch} < current {self._fence}")
            corruption = self._wal.corruption
            if corruption is not None:
                raise corruption.error()
            if epoch > self._epoch:
                # Fence first: while the new epoch is being made durable neither
                # the old owner nor the new one may append.
                self._fence = epoch
                await asyncio.to_thread(store_epoch, self._dir, epoch)
                self._epoch = epoch
        return self.offsets()

    def _check_epoch(self, epoch: int) -> None:
        if epoch < self._fence:
            raise FailedPrecondition(f"stale epoch {epoch} < current {self._fence}")
        if epoch > self._epoch:
            raise FailedPrecondition(
                f"epoch {epoch} is newer than the partition's epoch {self._epoch}: "
                "open the partition first"
            )

    async def append(self, epoch: int, batches: Sequence[StoredBatch]) -> int:
        """Append contiguous batches; returns the next offset once all are fsynced.

        Offsets are reserved when called (before the first await), so concurrent
        appends are stored in call order.
        """
        _check_batches(batches)
        self._wal.check_writable()
        self._check_epoch(epoch)
        next_offset = self._wal.next_offset
        if batches[0].base_offset != next_offset:
            raise FailedPrecondition(
                f"base offset {batches[0].base_offset} does not match "
                f"the partition's next offset {next_offset}"
            )
        done = self._wal.append(batches, epoch)
        await asyncio.shield(done)
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
        start, end = self._wal.start_offset, self._wal.next_offset
        if from_offset < start:
            raise InvalidArgument(
                f"offset {from_offset} is below the partition's start offset {start}"
            )
        if from_offset > end:
            raise InvalidArgument(f"offset {from_offset} is beyond the partition's end {end}")
        if max_messages < 0:
            raise InvalidArgument(f"max_messages must not be negative, got {max_messages}")
        batches = await self._wal.read(from_offset, max_messages, max(max_bytes, 1))
        next_offset = batches[-1].end_offset if batches else from_offset
        return ReadResult(tuple(batches), next_offset)

    def offset_for_time(self, time_us: int) -> int:
        """See `Wal.offset_for_time`."""
        return self._wal.offset_for_time(time_us)

    async def commit_cursor(self, epoch: int, subscription: str, cursor: Cursor) -> None:
        """Durably store a subscription's cursor, if `epoch` is the current owner's."""
        self._check_epoch(epoch)
        await self._cursors.commit(subscription, cursor)

    async def get_cursor(self, subscription: str) -> Cursor | None:
        """The subscription's cursor, or None when none was committed."""
        return await self._cursors.get(subscription)

    async def close(self) -> None:
        """Flush queued appends and stop the WAL writer."""
        await self._wal.close()


def _check_batches(batches: Sequence[StoredBatch]) -> None:
    if not batches:
        raise InvalidArgument("an append needs at least one batch")
    for i, batch in enumerate(batches):
        if not 1 <= batch.count <= MAX_BATCH_COUNT:
            raise InvalidArgument(f"batch {i}: count must be at least 1, got {batch.count}")
        if not batch.arrow_ipc:
            raise InvalidArgument(f"batch {i}: arrow_ipc must not be empty")
        if len(batch.arrow_ipc) > MAX_BODY_BYTES:
            raise InvalidArgument(f"batch {i}: {len(batch.arrow_ipc)} bytes is too large")
        if batch.base_offset < 0:
            raise InvalidArgument(f"batch {i}: base_offset must not be negative")
        if i and batch.base_offset != batches[i - 1].end_offset:
            raise InvalidArgument(
                f"batch {i}: base offset {batch.base_offset} does not follow the previous "
                f"batch, which ends at {batches[i - 1].end_offset}"
            )
