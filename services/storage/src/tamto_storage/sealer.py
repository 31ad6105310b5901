"""The sealer: the one background loop that turns WAL runs into segments and applies retention.

Every `SealOptions.check_interval_s` it looks at each open partition:

1. **Seal** when the unsealed durable bytes reach `segment_bytes` or the oldest
   unsealed acknowledged batch is `max_age_s` old (the default, 5 s with a 1 s
   check, makes every acknowledged message visible to Spark within about 6 s).
   Each segment is renamed into place (visible to a plain Parquet read), then
   the stream's manifest records it, then WAL files the segments fully cover
   are removed, but for the newest that fit in `wal_tail_bytes` (the read
   tail: reads there need no Parquet decoding). A crash between these steps
   leaves a complete segment that the next load finds and records
   (`PartitionStore`); sealing starts again at the end of the last segment on
   disk, so no message is sealed twice.
2. **Retention** (stream's `retention_ms` / `retention_bytes`): whole segments
   leave the manifest and the partition's readable range at once (read-tail
   WAL files wholly below that range go then too), and their files are
   deleted only `retention_grace_s` later, so a Spark job that listed them
   before can still read them. With the ``interest`` policy, what every
   subscription has acked goes too (`tamto_storage.reclaim`): whole segments,
   or all but the few messages still needed, which are carried forward into a
   small new segment; carried segments take their plain name once the files
   they replaced are gone (`Reclaimer.promote_ready`).

On shutdown `PartitionStore.close` stops the loop and seals everything left.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import structlog

from tamto_protocol.segment import ExpiredFile, Manifest
from tamto_storage import space
from tamto_storage.interest import ReclaimLimits
from tamto_storage.partition import Partition
from tamto_storage.partition_files import remove_files
from tamto_storage.publisher import Publisher
from tamto_storage.reclaim import Reclaimer
from tamto_storage.segments import Segment

log = structlog.get_logger(__name__)

_MIN_SMALL_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Retention:
    """How long a stream's messages stay, as storage applies it.

    `retention_ms` / `retention_bytes`: limits, 0 disables either.
    `interest`: also remove what every subscription has acked.
    """

    retention_ms: int = 0
    retention_bytes: int = 0
    interest: bool = False

    @classmethod
    def of(cls, value: Retention | tuple[int, int]) -> Retention:
        """A `Retention`, from itself or from a (retention_ms, retention_bytes) pair."""
        return value if isinstance(value, Retention) else cls(*value)


#: A stream's retention: a `Retention`, or (retention_ms, retention_bytes) for limits only.
RetentionFor = Callable[[str], Awaitable[Retention | tuple[int, int]]]


@dataclass(frozen=True, slots=True)
class SealOptions:
    """When to seal, how big segments get, and how long expired files stay."""

    segment_bytes: int = 64 * 1024 * 1024
    max_age_s: float = 5.0
    check_interval_s: float = 1.0
    retention_grace_s: float = 300.0
    #: Bytes of sealed WAL files the node keeps as read tails, newest first (0: none).
    wal_tail_bytes: int = 0


class StoreView:
    """What the sealer needs from the partition store (kept narrow for tests)."""

    def loaded(self) -> list[Partition]:
        raise NotImplementedError

    async def manifest_update(self, stream: str, change: Callable[[Manifest], Manifest]) -> None:
        raise NotImplementedError

    def manifest(self, stream: str) -> Manifest | None:
        raise NotImplementedError

    def stream_dir(self, stream: str) -> Path:
        raise NotImplementedError


def with_segments(manifest: Manifest, partition: int, segments: Sequence[Segment]) -> Manifest:
    """`manifest` with `segments` of `partition` added (already present ones kept once)."""
    known = {(s.partition, s.first_offset) for s in manifest.segments}
    new = [s.entry for s in segments if (partition, s.first_offset) not in known]
    return replace(manifest, segments=(*manifest.segments, *new))


def with_expired(
    manifest: Manifest,
    partition: int,
    segments: Sequence[Segment],
    floor: int,
    delete_after_us: int,
) -> Manifest:
    """`manifest` without `segments`, their files queued for deletion, the floor raised."""
    gone = {s.first_offset for s in segments}
    kept = tuple(
        s for s in manifest.segments if s.partition != partition or s.first_offset not in gone
    )
    listed = {e.file for e in manifest.expired}
    expired = [ExpiredFile(s.entry.file, delete_after_us) for s in segments]
    return replace(
        manifest,
        segments=kept,
        start_offsets={**manifest.start_offsets, partition: floor},
        expired=(*manifest.expired, *(e for e in expired if e.file not in listed)),
    )


class Sealer:
    """Owns the sealing/retention loop of a `PartitionStore`: `start`, then `stop`."""

    def __init__(
        self,
        store: StoreView,
        options: SealOptions,
        retention_for: RetentionFor | None = None,
        clock: Callable[[], float] = time.time,
        publisher: Publisher | None = None,
    ) -> None:
        """`publisher`: commits sealed segments to the cluster's segment store (None:
        the node's data directory is the store, as with one node)."""
        self._store = store
        self._publisher = publisher
        self._options = options
        self._retention_for = retention_for
        self._clock = clock  # wall clock (seconds) for retention and grace deadlines
        # Rewrites stay below a segment's size; small files (such as earlier
        # carried-forward ones) always merge, however small segments are set.
        limits = ReclaimLimits(
            small_bytes=max(options.segment_bytes // 8, _MIN_SMALL_BYTES),
            max_run_bytes=max(options.segment_bytes, _MIN_SMALL_BYTES),
        )
        published = publisher.committed_end if publisher is not None else None
        self._reclaimer = Reclaimer(
            store.manifest_update, limits, options.retention_grace_s, clock, published
        )
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: Held for a whole round: `PartitionStore.release_stream` takes it so no round
        #: seals a partition it is sealing and closing.
        self.round_lock = asyncio.Lock()

    @property
    def options(self) -> SealOptions:
        return self._options

    def start(self) -> None:
        """Start the background loop (once)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="sealer")

    async def stop(self) -> None:
        """Stop the loop and wait for the round in progress to finish."""
        self._stop.set()
        if self._task is not None:
            await self._task
            self._task = None

    async def _run(self) -> None:
        while not self._stop.is_set():
            try:
                await self.run_once()
            except Exception:  # one bad partition or a full disk must not end the loop
                log.exception("sealing round failed")
            # A timer between rounds, woken early by stop().
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self._options.check_interval_s)

    async def run_once(self, *, force: bool = False) -> None:
        """One round: seal what is due (everything when `force`), retention, deletions."""
        async with self.round_lock:
            await self._round(force=force)

    async def _round(self, *, force: bool) -> None:
        now = time.monotonic()
        for partition in self._store.loaded():
            if force or partition.seal_due(
                now, self._options.segment_bytes, self._options.max_age_s
            ):
                try:
                    await self.seal(partition)
                    space.written("seals")
                except Exception as exc:  # the other partitions keep sealing
                    if space.is_disk_full(exc):
                        # Its temporary file is gone (write_atomic); the next round retries.
                        space.refused(exc.filename or str(partition.id), exc, "seals")
                    else:
                        log.exception("sealing a partition failed", partition=str(partition.id))
        await self.publish_all()
        await self.fit_tails()
        if self._retention_for is not None:
            await self.apply_retention()
        await self.promote_carried()
        await self.delete_expired()

    async def publish_all(self) -> None:
        """Commit what this node sealed (and publishes) to the segment store, if any."""
        for partition in self._store.loaded():
            await self._publish(partition)

    async def _publish(self, partition: Partition) -> None:
        if self._publisher is None:
            return
        try:
            await self._publisher.publish(partition)
        except Exception:  # the others keep publishing; the WAL keeps this one's data
            log.exception("publishing to the segment store failed", partition=str(partition.id))

    async def seal_all(self) -> None:
        """Seal every durable batch of every open partition (shutdown, tests)."""
        await self.run_once(force=True)

    async def seal(self, partition: Partition) -> list[Segment]:
        """Seal one partition, record the segments in the manifest, then trim its WAL."""
        written = await partition.seal(self._options.segment_bytes)
        if not written:
            return []
        pid = partition.id
        await self._store.manifest_update(
            pid.stream, lambda m: with_segments(m, pid.partition, written)
        )
        await self._publish(partition)
        trimmed = await partition.trim_wal(self._options.wal_tail_bytes)
        log.info(
            "sealed",
            partition=str(pid),
            segments=[s.path.name for s in written],
            wal_files_removed=trimmed,
        )
        return written

    async def fit_tails(self) -> None:
        """Keep the newest sealed WAL files of all partitions within `wal_tail_bytes`.

        Newest by their newest batch's publish time, across partitions: the budget
        goes to what consumers are likeliest still to read.
        """
        tails = {partition: partition.sealed_wal_files() for partition in self._store.loaded()}
        newest_first = sorted(
            (
                (f.newest_publish_us, f.size, partition)
                for partition, files in tails.items()
                for f in files
            ),
            key=lambda item: item[0],
            reverse=True,
        )
        keep = dict.fromkeys(tails, 0)
        left = self._options.wal_tail_bytes
        for _, size, partition in newest_first:
            if size > left:
                break
            left -= size
            keep[partition] += size
        for partition, files in tails.items():
            if keep[partition] < sum(f.size for f in files):
                await partition.trim_wal(keep[partition])

    async def apply_retention(self) -> None:
        """Expire whole segments past each stream's limits; with interest retention, drop
        and carry forward what every subscription has acked."""
        assert self._retention_for is not None
        now_us = int(self._clock() * 1e6)
        policies: dict[str, Retention] = {}
        for partition in self._store.loaded():
            stream = partition.id.stream
            if stream not in policies:
                policies[stream] = Retention.of(await self._retention_for(stream))
            policy = policies[stream]
            await self.expire(partition, now_us, policy.retention_ms, policy.retention_bytes)
            if policy.interest:
                # What every subscription acked must not stay readable in the read
                # tail once it is gone from the segments.
                await partition.trim_wal()
                try:
                    await self._reclaimer.reclaim(partition)
                except Exception:  # keep the other partitions' retention going
                    log.exception("interest retention failed", partition=str(partition.id))

    async def promote_carried(self) -> None:
        """Give carried-forward segments their plain names once the files they replaced
        are past their grace period (before those are deleted: a listing never misses them)."""
        now_us = int(self._clock() * 1e6)
        for partition in self._store.loaded():
            manifest = self._store.manifest(partition.id.stream)
            if manifest is not None:
                await self._reclaimer.promote_ready(partition, manifest, now_us)

    async def expire(
        self, partition: Partition, now_us: int, retention_ms: int, retention_bytes: int
    ) -> list[Segment]:
        """Apply a retention policy to one partition; the files go after the grace period."""
        expired = partition.expire(now_us, retention_ms, retention_bytes)
        if not expired:
            return []
        pid = partition.id
        floor = partition.segment_log.floor
        delete_after_us = now_us + int(self._options.retention_grace_s * 1e6)
        await self._store.manifest_update(
            pid.stream, lambda m: with_expired(m, pid.partition, expired, floor, delete_after_us)
        )
        await partition.trim_wal(self._options.wal_tail_bytes)  # the tail below the floor
        log.info(
            "segments expired",
            partition=str(pid),
            segments=[s.path.name for s in expired],
            start_offset=floor,
            delete_after_us=delete_after_us,
        )
        return expired

    async def delete_expired(self) -> None:
        """Delete expired segment files whose grace period has passed."""
        now_us = int(self._clock() * 1e6)
        streams = {p.id.stream for p in self._store.loaded()}
        for stream in sorted(streams):
            manifest = self._store.manifest(stream)
            if manifest is None:
                continue
            # A file that is (again) a live segment's is never deleted: say a
            # promoted segment took a same-named file's place before a crash.
            live = {s.file for s in manifest.segments}
            due = [e for e in manifest.expired if e.delete_after_us <= now_us]
            if not due:
                continue
            due_live = {e.file for e in due if e.file in live}
            due = [e for e in due if e.file not in live]
            stream_dir = self._store.stream_dir(stream)
            await asyncio.to_thread(remove_files, [stream_dir / e.file for e in due])
            gone = {e.file for e in due} | due_live
            await self._store.manifest_update(
                stream,
                lambda m, gone=gone: replace(  # type: ignore[misc]
                    m, expired=tuple(e for e in m.expired if e.file not in gone)
                ),
            )
            log.info("expired segment files deleted", stream=stream, files=sorted(gone))
