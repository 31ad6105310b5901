"""The write-ahead log of one partition: CRC-framed Arrow batches, group-committed.

On disk: ``<partition-dir>/_wal/<first-offset:020d>.log``, each file a run of
frames (format in `tamto_storage.frame`: a 36-byte header — body length u32,
crc32 u32 over the rest of the header and the body, base_offset i64, count u32,
publish_time_us i64, epoch i64 — then the producer's Arrow IPC bytes unchanged).
A file is named by the offset of its first frame; the next file starts where the
previous one ends. A new file is started when the next frame would push the
current one past `WalOptions.file_bytes`; the old file is fsynced first, so only
the last file can ever end in a torn frame (see `tamto_storage.wal_recovery`).
Once everything stored is sealed, `roll` moves appends to a new, empty file so
the old ones can all be deleted; that file's name keeps the next offset.

Group commit: `append` places the frame (file, position) synchronously and
queues it; the writer (`tamto_storage.wal_commit`, started by `Wal.open`,
stopped by `Wal.close`) writes and fsyncs everything queued in one go and then
makes it readable. An append is acknowledged only after the fsync that covers its
bytes; readers only see acknowledged batches.

The in-memory index holds one entry per batch (not per message); reads find the
batches covering an offset by bisection, map the file read-only and re-verify
each frame's CRC; a batch read is a view of the mapping, not a copy.
 (`tamto_storage.wal_frames`)
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from tamto_common.durable import fsync_dir, fsync_file, make_dirs
from tamto_common.errors import FailedPrecondition, TamtoError, Unavailable
from tamto_storage.frame import HEADER_SIZE, encode_header
from tamto_storage.model import StoredBatch
from tamto_storage.wal_commit import INLINE_FSYNC_S, GroupCommit, PendingFrame
from tamto_storage.wal_frames import read_frames
from tamto_storage.wal_index import Corruption, IndexEntry, WalFileSummary
from tamto_storage.wal_recovery import list_wal_files, recover, wal_file_name

log = structlog.get_logger(__name__)


class SealedFrameDamaged(Exception):
    """A frame of the read tail failed its checks; its batches are to be read from segments."""

    def __init__(self, corruption: Corruption) -> None:
        super().__init__(corruption.error().args[0])
        self.corruption = corruption


@dataclass(frozen=True, slots=True)
class WalOptions:
    """How a WAL writes: file size at which it rolls, and its fsync policy."""

    file_bytes: int = 64 * 1024 * 1024
    group_commit: bool = True  # False: interval mode
    fsync_interval_s: float = 0.05


class Wal(GroupCommit):
    """The write-ahead log of one partition. Create with `Wal.open`, stop with `close`."""

    def __init__(self, directory: Path, options: WalOptions, label: str) -> None:
        self._dir = directory
        self._options: WalOptions = options
        self._label = label
        self._entries: list[IndexEntry] = []
        # Per file, in offset order, kept as entries come and go: the sealer asks
        # every round, and a file may hold many thousands of entries.
        self._files: dict[Path, WalFileSummary] = {}
        self._bases: list[int] = []  # entries' base offsets, for bisection
        self._start_offset = 0
        self._durable_end = 0
        self._reserved_end = 0
        self._max_epoch = 0
        self._corruption: Corruption | None = None
        self._failure: TamtoError | None = None
        self._tail: Path | None = None  # file the next frame goes to
        self._tail_size = 0  # bytes placed in it, written or queued
        self._pending: list[PendingFrame] = []
        self._last_queued: asyncio.Future[None] | None = None  # the newest append's outcome
        self._wake = asyncio.Event()
        self._closing = False
        self._committing = False
        self._writer_fd: int | None = None
        self._writer_path: Path | None = None
        self._last_sync = 0.0
        self._fsyncs = 0
        # Starts above the bar: commits go to a thread until fsyncs are seen to be fast.
        self._fsync_average_s = 2 * INLINE_FSYNC_S
        self._commit_ended = 0.0
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, directory: Path, options: WalOptions, *, label: str) -> Wal:
        """Open (creating if needed) the WAL in `directory`, recover it, start its writer."""
        await asyncio.to_thread(make_dirs, directory)
        recovered = await asyncio.to_thread(recover, directory)
        wal = cls(directory, options, label)
        wal._entries = list(recovered.entries)
        for entry in recovered.entries:
            wal._count_in_file(entry)
        wal._bases = [e.base_offset for e in recovered.entries]
        wal._start_offset = recovered.start_offset
        wal._durable_end = wal._reserved_end = recovered.next_offset
        wal._max_epoch = recovered.max_epoch
        wal._corruption = recovered.corruption
        if recovered.tail is not None:
            wal._tail, wal._tail_size = recovered.tail
        wal._task = asyncio.create_task(wal._run(), name=f"wal-writer {label}")
        return wal

    @property
    def directory(self) -> Path:
        """Where its files are."""
        return self._dir

    @property
    def options(self) -> WalOptions:
        """How this WAL writes (file size, fsync policy)."""
        return self._options

    @property
    def start_offset(self) -> int:
        """The oldest offset stored."""
        return self._start_offset

    @property
    def next_offset(self) -> int:
        """The offset the next appended batch must start at (includes queued appends)."""
        return self._reserved_end

    @property
    def durable_offset(self) -> int:
        """The offset just past the last fsynced (readable) batch."""
        return self._durable_end

    @property
    def max_epoch(self) -> int:
        """The highest epoch found on any frame at recovery."""
        return self._max_epoch

    @property
    def corruption(self) -> Corruption | None:
        """Where the log stops being trustworthy, if anywhere."""
        return self._corruption

    @property
    def fsyncs(self) -> int:
        """Group commits (fsyncs) done since open — lets tests see commits being shared."""
        return self._fsyncs

    def check_writable(self) -> None:
        """Raise if appends cannot be accepted (corrupt, failed or closed log)."""
        if self._corruption is not None:
            raise self._corruption.error()
        if self._failure is not None:
            raise self._failure
        if self._closing:
            raise Unavailable(f"partition {self._label} is closing")

    def append(self, batches: Sequence[StoredBatch], epoch: int) -> asyncio.Future[None]:
        """Queue contiguous `batches`; the future resolves once all of them are fsynced.

        Placement is decided here, synchronously, so appends keep call order.
        The first base offset must be `next_offset`; the caller has checked
        counts and bodies.
        """
        self.check_writable()
        expected = self._reserved_end
        for batch in batches:
            if batch.base_offset != expected:
                raise FailedPrecondition(
                    f"base offset {batch.base_offset} does not match next offset {expected}"
                )
            expected = batch.end_offset
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # The caller may be cancelled and stop waiting; retrieve the outcome anyway
        # so a failure is not reported as "never retrieved".
        done.add_done_callback(lambda f: f.cancelled() or f.exception())
        queued_before = bool(self._pending)
        for i, batch in enumerate(batches):
            entry, header = self._place(batch, epoch)
            last = i == len(batches) - 1
            self._pending.append(
                PendingFrame(entry, header, batch.arrow_ipc, done if last else None)
            )
        self._last_queued = done
        if not self.commit_in_caller(queued_before):
            self._wake.set()
        return done

    async def settled(self) -> None:
        """Wait until every append queued so far is fsynced or failed (groups commit
        in queue order, so the newest append's outcome comes last)."""
        last = self._last_queued
        if last is not None and not last.done():
            await asyncio.wait([last])

    def _place(self, batch: StoredBatch, epoch: int) -> tuple[IndexEntry, bytes]:
        """Decide the batch's file and position, rolling to a new file when full."""
        frame_length = HEADER_SIZE + len(batch.arrow_ipc)
        if self._tail is None or (
            self._tail_size > 0 and self._tail_size + frame_length > self._options.file_bytes
        ):
            self._tail = self._dir / wal_file_name(batch.base_offset)
            self._tail_size = 0
        entry = IndexEntry(
            base_offset=batch.base_offset,
            count=batch.count,
            publish_time_us=batch.publish_time_us,
            epoch=epoch,
            file=self._tail,
            position=self._tail_size,
            body_length=len(batch.arrow_ipc),
        )
        header = encode_header(
            base_offset=batch.base_offset,
            count=batch.count,
            publish_time_us=batch.publish_time_us,
            epoch=epoch,
            body=batch.arrow_ipc,
        )
        self._tail_size += frame_length
        self._reserved_end = batch.end_offset
        return entry, header

    async def read(
        self, from_offset: int, max_messages: int, max_bytes: int, *, sealed_end: int = 0
    ) -> list[StoredBatch]:
        """Acknowledged batches covering `from_offset` onwards, within the limits.

        The first batch may start before `from_offset`. At least one batch is
        returned when any exists at or after `from_offset`, however large.
        `max_messages` 0 means no message limit. The caller checks the range.

        A damaged frame below `sealed_end` (the read tail: its batches are in
        segments too) does not mark the log corrupt: the batches before it are
        returned, or `SealedFrameDamaged` raised when it is the first.
        """
        if self._corruption is not None and from_offset >= self._corruption.offset:
            raise self._corruption.error()
        chosen = self._select(from_offset, max_messages, max_bytes)
        if not chosen:
            return []
        batches, corruption = await asyncio.to_thread(read_frames, chosen)
        if corruption is not None:
            if corruption.offset < sealed_end:
                if not batches:
                    raise SealedFrameDamaged(corruption)
                return batches
            self._record_corruption(corruption)
            if not batches:
                raise corruption.error()
        return batches

    def offset_for_time(self, time_us: int) -> int:
        """The first durable offset whose batch was published at or after `time_us`.

        The durable end when nothing is that recent. Publish times are per batch
        and almost always ascending; a scan (not a bisection) stays right when a
        new owner's clock was slightly behind the old one's.
        """
        for entry in self._entries:
            if entry.publish_time_us >= time_us:
                return entry.base_offset
        return self._durable_end

    def bytes_from(self, offset: int) -> int:
        """Body bytes of the durable batches that end after `offset`."""
        i = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        return sum(e.body_length for e in self._entries[i:] if e.end_offset > offset)

    def sealed_files(self, sealed_end: int) -> list[WalFileSummary]:
        """The WAL files whose batches all end at or before `sealed_end`, oldest first."""
        return list(itertools.takewhile(lambda f: f.end_offset <= sealed_end, self._files.values()))

    def _count_in_file(self, entry: IndexEntry) -> None:
        found = self._files.get(entry.file)
        if found is None:
            self._files[entry.file] = WalFileSummary(
                entry.base_offset, entry.end_offset, entry.frame_length, entry.publish_time_us
            )
        else:
            found.add(entry)

    def sealed_tail_start(self, sealed_end: int, keep_bytes: int) -> int:
        """Where the newest WAL files wholly at or before `sealed_end` that fit, all
        together, in `keep_bytes` begin (`sealed_end` when none fits).

        `drop_files_before` that offset keeps those files (a read tail) and drops
        the older ones.
        """
        start = sealed_end
        kept = 0
        for file in reversed(self.sealed_files(sealed_end)):
            if kept + file.size > keep_bytes:
                break
            kept += file.size
            start = file.first_offset
        return start

    def drop_files_before(self, offset: int, *, successor: Path | None = None) -> list[Path]:
        """Forget the WAL files whose batches all end at or before `offset`; return them.

        Called once a segment covers those offsets; the caller deletes the
        files. Only files followed by a durable frame in a later file go: such
        a file is complete (the writer fsyncs a file before starting the next)
        and no queued append can still land in it. The file appends go to is
        never returned. A read that picked a dropped file moments earlier sees
        FileNotFoundError and is retried by the partition.

        `successor` (see `roll`): a file that exists durably and that appends
        now go to; then the last durable file may go as well, since the
        successor's name keeps the log's next offset across a restart.
        """
        dropped: list[Path] = []
        i = 0
        while i < len(self._entries):
            file = self._entries[i].file
            j = i
            while j < len(self._entries) and self._entries[j].file == file:
                j += 1
            if self._entries[j - 1].end_offset > offset:
                break  # still holds unsealed batches
            if j == len(self._entries) and (
                successor is None or file == successor or self._tail != successor
            ):
                break  # the last durable file, and appends may still go to it
            dropped.append(file)
            i = j
        if dropped:
            self._entries = self._entries[i:]
            self._bases = self._bases[i:]
            for file in dropped:
                del self._files[file]
            self._start_offset = (
                self._entries[0].base_offset if self._entries else self._durable_end
            )
        return dropped

    def entries_from(self, offset: int) -> list[IndexEntry]:
        """The durable batches that end after `offset`, in order."""
        i = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        return [e for e in self._entries[i:] if e.end_offset > offset]

    def truncate(self, offset: int) -> list[IndexEntry]:
        """Drop every batch from `offset` (a batch's base offset) on, durably; return them.

        Blocking but brief (a file cut, unlinks, fsyncs), on the event loop so no
        append is placed meanwhile. The caller waits for `settled` first and has
        checked that nothing sealed or still wanted is dropped. The file holding
        the first dropped batch is cut where its frame began and stays (empty or
        not) as the file appends go to next: its name or its frames keep the
        log's end across a restart; the later files are deleted. Nothing at or
        past `offset` is served afterwards, and the next append starts there.
        """
        self.check_writable()
        if self._pending or self._reserved_end != self._durable_end:
            raise Unavailable(f"partition {self._label}: appends are in flight")
        dropped = self.entries_from(offset)
        if not dropped:
            return []
        first = dropped[0]
        if first.base_offset != offset:
            raise FailedPrecondition(
                f"offset {offset} is inside the batch of offsets "
                f"{first.base_offset}-{first.end_offset - 1}: truncate at a batch boundary"
            )
        later = {e.file for e in dropped} - {first.file}
        self._discard_from(first.file, first.position, later)
        fsync_file(first.file)
        fsync_dir(self._dir)
        kept = len(self._entries) - len(dropped)
        self._entries = self._entries[:kept]
        self._bases = self._bases[:kept]
        for file in later:
            self._files.pop(file, None)
        self._files.pop(first.file, None)
        for entry in self._entries:
            if entry.file == first.file:
                self._count_in_file(entry)
        self._durable_end = self._reserved_end = offset
        if not self._entries:
            self._start_offset = offset
        self._tail, self._tail_size = first.file, first.position
        return dropped

    def start_at(self, offset: int) -> None:
        """Make this empty log start at `offset` instead of 0, durably.

        For a replica that receives a copy of a partition whose start retention
        moved past 0 (re-replication, docs/cluster.md section 2). Blocking but
        brief, on the event loop so no append is placed meanwhile. The log's one
        (empty) file is renamed after `offset`, atomically, or created so: recovery
        starts the log at its first file's name, so the start survives a restart.
        Refused (FailedPrecondition) once the log holds or awaits an entry.
        """
        self.check_writable()
        if self._entries or self._pending or self._reserved_end != self._durable_end:
            raise FailedPrecondition(
                f"partition {self._label}: only an empty log can start at offset {offset}"
            )
        if self._durable_end == offset:
            return
        files = list_wal_files(self._dir)
        if any(path.stat().st_size > 0 for _, path in files) or len(files) > 1:
            raise FailedPrecondition(f"partition {self._label}: its WAL files are not empty")
        if self._writer_fd is not None:
            os.close(self._writer_fd)
            self._writer_fd = self._writer_path = None
        target = self._dir / wal_file_name(offset)
        if files:
            os.replace(files[0][1], target)
            fsync_dir(self._dir)
        else:
            create_wal_file(target)
        self._files.clear()
        self._start_offset = self._durable_end = self._reserved_end = offset
        self._tail, self._tail_size = target, 0

    def roll(self, sealed_end: int) -> Path | None:
        """Send future appends to a new file if everything stored is sealed; return it.

        Without this the last WAL file, however large, would stay until the
        next append. Only when nothing is queued or being written, every
        durable batch ends at or before `sealed_end`, and the current file is
        not empty. The returned file (named by the next offset) does not exist
        yet: the caller creates it durably (`create_wal_file`) and then passes
        it to `drop_files_before` as the successor. An append placed in it
        meanwhile is fine: both sides create it without truncating.
        """
        if (
            self._pending
            or self._reserved_end != self._durable_end
            or self._durable_end > sealed_end
            or self._tail is None
            or self._tail_size == 0
            or self._closing
            or self._corruption is not None
            or self._failure is not None
        ):
            return None
        self._tail = self._dir / wal_file_name(self._reserved_end)
        self._tail_size = 0
        return self._tail

    def _select(self, from_offset: int, max_messages: int, max_bytes: int) -> list[IndexEntry]:
        i = max(bisect.bisect_right(self._bases, from_offset) - 1, 0)
        limit = self._corruption.offset if self._corruption is not None else None
        chosen: list[IndexEntry] = []
        messages = 0
        size = 0
        for entry in self._entries[i:]:
            if entry.end_offset <= from_offset:
                continue
            if limit is not None and entry.end_offset > limit:
                break
            if chosen and (size + entry.body_length > max_bytes):
                break
            chosen.append(entry)
            size += entry.body_length
            messages += entry.end_offset - max(entry.base_offset, from_offset)
            if max_messages and messages >= max_messages:
                break
        return chosen

    def _record_corruption(self, corruption: Corruption) -> None:
        if self._corruption is None or corruption.offset < self._corruption.offset:
            log.error(
                "wal corruption found by a read",
                partition=self._label,
                file=str(corruption.file),
                position=corruption.position,
                offset=corruption.offset,
            )
            self._corruption = corruption

    async def close(self) -> None:
        """Flush queued appends (they are still acknowledged), stop the writer, close files."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
            self._task = None
        if self._writer_fd is not None:
            os.close(self._writer_fd)
            self._writer_fd = None


def create_wal_file(path: Path) -> None:
    """Create an (empty) WAL file durably without truncating it (blocking)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
    fsync_dir(path.parent)
