"""A WAL's writer: group commit of the frames `Wal.append` placed.

Group commit: `append` places the frame (file, position) synchronously and
queues it. One writer task — started by `Wal.open`, stopped by `Wal.close` —
takes everything queued, writes it, runs one fsync, then adds the batches to
the in-memory index and resolves every waiting append. An append is
acknowledged only after the fsync that covers its bytes; readers only see
acknowledged batches. In interval mode the writer fsyncs at most once per
`fsync_interval_s`, letting more appends join each commit.

The write and fsync run in a worker thread, except for a small group
(`INLINE_GROUP_BYTES`) while this WAL's recent fsyncs were fast
(`INLINE_FSYNC_S`): that one runs on the event loop, blocking it for about a
fast fsync. Handing a commit to a thread and back costs two thread wake-ups,
~0.5 ms on the build machine, more than such a fsync (~0.45 ms); inline, the
p99 publish-to-deliver latency at 5,000 msg/s was 5-22% lower in A/B runs of
`tamto bench`. A slow disk, or a large group, keeps the commit off
the loop, and so off the other partitions' way.

An append that finds the writer idle and nothing queued ahead of it commits in
the caller (`commit_in_caller`) when its group would be committed on the loop
anyway: the same write and fsync, without waking the writer task and waking the
caller back (two loop hand-offs per append, which is every append of a partition
whose router keeps one append in flight). Order holds: nothing earlier is queued
or being committed. Only an append that comes more than a fast fsync after the
previous commit ended does so: appends arriving back to back (several writers on
one partition) go to the writer, which groups those that come during a commit.

`GroupCommit` is the part of `tamto_storage.wal.Wal` that writes; the WAL's state
it works on is declared here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import structlog

from tamto_common.durable import fsync_dir
from tamto_common.errors import TamtoError, Unavailable
from tamto_storage import metrics, space
from tamto_storage.wal_index import Corruption, IndexEntry, WalFileSummary

log = structlog.get_logger(__name__)

_IOV_MAX = 512  # buffers per pwritev call, well under the kernel's IOV_MAX

#: A group of at most this many body bytes may be committed on the event loop...
INLINE_GROUP_BYTES = 256 * 1024
#: ...while the moving average of this WAL's fsyncs is below this.
INLINE_FSYNC_S = 0.001
#: Weight of the newest fsync in that average.
_FSYNC_AVERAGE_WEIGHT = 0.2
#: Monotonic seconds (the time since the last commit ended).
_clock = time.monotonic


@dataclass(frozen=True, slots=True)
class PendingFrame:
    """A frame placed by `Wal.append`, waiting for the writer."""

    entry: IndexEntry
    header: bytes
    body: bytes | memoryview
    done: asyncio.Future[None] | None  # set on the last batch of each append call


class CommitPolicy(Protocol):
    """What the writer reads of `tamto_storage.wal.WalOptions`."""

    @property
    def group_commit(self) -> bool: ...

    @property
    def fsync_interval_s(self) -> float: ...


class GroupCommit:
    """Writes and fsyncs queued frames, a group per round (a mixin of `Wal`)."""

    _options: CommitPolicy
    _label: str
    _entries: list[IndexEntry]
    _files: dict[Path, WalFileSummary]
    _bases: list[int]
    _durable_end: int
    _reserved_end: int
    _corruption: Corruption | None
    _failure: TamtoError | None
    _tail: Path | None
    _tail_size: int
    _pending: list[PendingFrame]
    _wake: asyncio.Event
    _closing: bool
    _committing: bool  # the writer task is committing a group now
    _writer_fd: int | None
    _writer_path: Path | None
    _last_sync: float
    _fsyncs: int
    _fsync_average_s: float
    _commit_ended: float  # `_clock()` when the last commit ended

    def _count_in_file(self, entry: IndexEntry) -> None:
        raise NotImplementedError  # `Wal._count_in_file`

    async def _run(self) -> None:
        """The writer: one group commit per round until closed and drained."""
        loop = asyncio.get_running_loop()
        while True:
            if not self._pending:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            if not self._options.group_commit and not self._closing:
                # Interval mode: let appends pile up until the next fsync is due.
                delay = self._last_sync + self._options.fsync_interval_s - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            group, self._pending = self._pending, []
            self._committing = True
            try:
                await self._commit(group)
            finally:
                self._committing = False
            self._last_sync = loop.time()

    def commits_inline(self, group_bytes: int) -> bool:
        """Whether a group of `group_bytes` is committed on the event loop (module docstring)."""
        return self._fsync_average_s < INLINE_FSYNC_S and group_bytes <= INLINE_GROUP_BYTES

    def commit_in_caller(self, queued_before: bool) -> bool:
        """Commit what is queued now, in the calling task, if that is safe and small
        (module docstring); False: the writer task is to do it. `queued_before`:
        something was queued before the caller's frames."""
        group = self._pending
        if (
            queued_before
            or _clock() - self._commit_ended < self._fsync_average_s
            or self._committing
            or self._closing
            or not self._options.group_commit
            or not self.commits_inline(sum(len(item.body) for item in group))
        ):
            return False
        self._pending = []
        try:
            fsync_seconds = self._write_group(group)
        except Exception as exc:
            self._write_failed(group, exc)
        else:
            self._committed(group, fsync_seconds)
        return True

    async def _commit(self, group: list[PendingFrame]) -> None:
        try:
            if self.commits_inline(sum(len(item.body) for item in group)):
                fsync_seconds = self._write_group(group)
            else:
                fsync_seconds = await asyncio.to_thread(self._write_group, group)
        except Exception as exc:  # the writer must survive to fail later appends, not hang them
            self._write_failed(group, exc)
            return
        self._committed(group, fsync_seconds)

    def _write_failed(self, group: list[PendingFrame], exc: Exception) -> None:
        if space.is_disk_full(exc):
            self._refuse_for_space(group, exc)
        else:
            self._fail(group, exc)

    def _committed(self, group: list[PendingFrame], fsync_seconds: list[float]) -> None:
        """`group` is on disk: count it, index it and resolve its appends."""
        self._commit_ended = _clock()
        space.written()
        self._fsyncs += 1
        for seconds in fsync_seconds:
            metrics.FSYNC_SECONDS.observe(seconds)
            self._fsync_average_s += _FSYNC_AVERAGE_WEIGHT * (seconds - self._fsync_average_s)
        metrics.GROUP_COMMIT_BATCHES.observe(len(group))
        for item in group:
            self._entries.append(item.entry)
            self._count_in_file(item.entry)
            self._bases.append(item.entry.base_offset)
            self._durable_end = item.entry.end_offset
            if item.done is not None and not item.done.done():
                item.done.set_result(None)  # a cancelled waiter's batches are stored all the same

    def _fail(self, group: list[PendingFrame], exc: Exception) -> None:
        # The log now has a hole at the first failed offset: refuse everything
        # until a reopen recovers what reached the disk.
        log.error("wal write failed", partition=self._label, error=str(exc))
        self._failure = Unavailable(f"partition {self._label} write failed: {exc}")
        for item in [*group, *self._pending]:
            if item.done is not None and not item.done.done():
                item.done.set_exception(self._failure)
        self._pending = []

    def _refuse_for_space(self, group: list[PendingFrame], exc: OSError) -> None:
        """The disk is full (`tamto_storage.space`): nothing of `group`, or of what queued
        behind it, is acknowledged, and the log forgets where they were placed. Whatever
        part of them reached a file is cut off, so the next append starts again at the
        durable end, in their place: no hole, and appends resume once space returns."""
        first = group[0].entry
        error = space.refused(first.file, exc)
        failed, self._pending = [*group, *self._pending], []
        try:
            self._discard_from(first.file, first.position, {item.entry.file for item in failed})
        except OSError as cleanup:
            self._fail(failed, cleanup)
            return
        self._reserved_end = self._durable_end
        self._tail, self._tail_size = first.file, first.position
        for item in failed:
            if item.done is not None and not item.done.done():
                item.done.set_exception(error)

    def _discard_from(self, file: Path, position: int, files: set[Path]) -> None:
        """Cut `file` back to `position` and delete the later `files` (blocking, brief)."""
        if self._writer_fd is not None and self._writer_path != file:
            os.close(self._writer_fd)
            self._writer_fd = self._writer_path = None
        for later in files - {file}:
            with contextlib.suppress(FileNotFoundError):
                later.unlink()
        if self._writer_fd is not None:
            os.ftruncate(self._writer_fd, position)
            return
        with contextlib.suppress(FileNotFoundError):
            fd = os.open(file, os.O_WRONLY)
            try:
                os.ftruncate(fd, position)
            finally:
                os.close(fd)

    def _write_group(self, group: Sequence[PendingFrame]) -> list[float]:
        """Write and fsync a group (worker thread, or the loop: `commits_inline`).
        Returns each fsync's seconds."""
        fsync_seconds: list[float] = []
        run: list[PendingFrame] = []
        for item in group:
            if run and item.entry.file != run[0].entry.file:
                self._write_run(run, fsync_seconds)
                run = []
            run.append(item)
        if run:
            self._write_run(run, fsync_seconds)
        assert self._writer_fd is not None
        fsync_seconds.append(_timed_fsync(self._writer_fd))
        return fsync_seconds

    def _write_run(self, run: Sequence[PendingFrame], fsync_seconds: list[float]) -> None:
        """Write frames that go to one file, contiguously, from the first's position."""
        path = run[0].entry.file
        fd = self._writer_fd
        if fd is None or path != self._writer_path:
            if fd is not None:
                # Roll: the old file must be durable before the new one gets data,
                # so only the last file can end torn.
                fsync_seconds.append(_timed_fsync(fd))
                os.close(fd)
                self._writer_fd = None
            fd = self._writer_fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            self._writer_path = path
            fsync_dir(path.parent)
        buffers: list[bytes | memoryview] = []
        for item in run:
            buffers += (item.header, item.body)
        position = run[0].entry.position
        for i in range(0, len(buffers), _IOV_MAX):
            position += _pwrite_all(fd, buffers[i : i + _IOV_MAX], position)


def _timed_fsync(fd: int) -> float:
    started = time.perf_counter()
    os.fsync(fd)
    return time.perf_counter() - started


def _pwrite_all(fd: int, buffers: Sequence[bytes | memoryview], position: int) -> int:
    total = sum(len(b) for b in buffers)
    written = os.pwritev(fd, buffers, position)
    if written < total:  # rare short write: finish the rest plainly
        rest = memoryview(b"".join(buffers))[written:]
        while rest:
            n = os.pwrite(fd, rest, position + written)
            written += n
            rest = rest[n:]
    return total
