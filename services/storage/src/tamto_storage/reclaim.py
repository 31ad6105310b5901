"""Interest retention on one storage node: dropping and carrying forward acked messages.

For each partition of a stream whose retention policy is ``interest`` the
sealer calls `Reclaimer.reclaim`, which

1. reads every subscription cursor of the partition and intersects their acks
   (`tamto_storage.interest.AckedByAll`; no cursor: nothing happens);
2. keeps the partition's newest sealed message whenever the WAL holds nothing
   newer, so a read from any offset below the log's end still finds a batch
   (the router walks the log by offset and treats an empty read as an error);
3. drops leading segments nothing needs (the partition's start moves past
   them) and rewrites mostly-acked runs of segments as one small segment
   holding only the needed messages (`tamto_storage.carry`);
4. records it all in one new manifest version: the replaced files are queued
   for deletion after the grace period, as time/size retention does.

With a segment store (`tamto_storage.publisher`), only segments the store has
committed are dropped or rewritten: the store must get every offset as sealed,
once, before a node may forget it (the publisher continues at the store's end
and cannot publish a range its log no longer holds whole). A dropped segment
leaves the store through the partition's start moving (the publisher expires
the objects below it after the grace period); a rewrite is local only (the
store keeps the originals until time retention removes them).

`promote_ready` later gives a carried-forward segment its plain file name,
once the plain files it replaced are past their grace period; see
docs/segments.md for what a Spark reader sees at each step.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt
import structlog

from tamto_common.errors import DataLoss
from tamto_protocol.segment import (
    ExpiredFile,
    Manifest,
    SegmentEntry,
    parse_segment_name,
    partition_dir_name,
)
from tamto_storage import carry, metrics
from tamto_storage.interest import (
    AckedByAll,
    ReclaimLimits,
    ReclaimPlan,
    count_in,
    plan_reclaim,
)
from tamto_storage.model import PartitionId
from tamto_storage.partition import Partition
from tamto_storage.segments import Segment

log = structlog.get_logger(__name__)

#: Carried-forward segments whose offsets are remembered between rounds.
_OFFSETS_CACHED = 1024


@dataclass(frozen=True, slots=True)
class Swap:
    """One manifest change of a partition: entries out, entries in, files to delete later."""

    partition: int
    removed: tuple[SegmentEntry, ...] = ()
    added: tuple[SegmentEntry, ...] = ()
    expire_files: tuple[str, ...] = ()
    delete_after_us: int = 0
    floor: int | None = None  # the partition's new start, when it moved
    unexpire_files: tuple[str, ...] = ()  # replaced in place: no longer to be deleted

    def apply(self, manifest: Manifest) -> Manifest:
        """`manifest` with this change made."""
        gone = {e.file for e in self.removed}
        segments = [s for s in manifest.segments if s.file not in gone]
        known = {s.file for s in segments}
        segments += [e for e in self.added if e.file not in known]
        listed = {e.file for e in manifest.expired}
        expired = [e for e in manifest.expired if e.file not in self.unexpire_files]
        expired += [
            ExpiredFile(f, self.delete_after_us) for f in self.expire_files if f not in listed
        ]
        starts = dict(manifest.start_offsets)
        if self.floor is not None:
            starts[self.partition] = self.floor
        return replace(
            manifest, segments=tuple(segments), start_offsets=starts, expired=tuple(expired)
        )


#: Applies a change to a stream's manifest and writes the new version durably.
ManifestUpdate = Callable[[str, Callable[[Manifest], Manifest]], Awaitable[None]]
#: Where the segment store's committed segments of a partition end (None: not known yet).
Published = Callable[[PartitionId], int | None]


class Reclaimer:
    """Applies interest retention to partitions (one per sealer; keeps only a cache)."""

    def __init__(
        self,
        update: ManifestUpdate,
        limits: ReclaimLimits,
        grace_s: float,
        clock: Callable[[], float] = time.time,
        published: Published | None = None,
    ) -> None:
        """`published`: where the segment store's committed copy of a partition ends
        (None when not known yet); without it there is no store beyond this node."""
        self._published = published
        self._update = update
        self._limits = limits
        self._grace_s = grace_s
        self._clock = clock  # wall clock (seconds)
        self._offsets: dict[tuple[Path, int, int], npt.NDArray[np.int64]] = {}

    def _delete_after_us(self) -> int:
        # Taken when the change is recorded, after any rewrite: a slow rewrite must
        # not eat into the grace period of the files it replaces.
        return int((self._clock() + self._grace_s) * 1e6)

    def _reclaimable(self, partition: Partition) -> tuple[Segment, ...]:
        """The leading segments of `partition` retention may touch: those the segment
        store has committed (all of them without a store)."""
        segments = partition.segment_log.segments
        if self._published is None:
            return segments
        end = self._published(partition.id)
        if end is None:
            return ()
        return tuple(s for s in segments if s.end_offset <= end)

    async def _record(self, stream: str, swap: Swap) -> None:
        await self._update(stream, swap.apply)

    async def _needed_count(self, segment: Segment, acked: AckedByAll) -> int:
        """How many rows of `segment` some subscription still needs."""
        spans = acked.needed(segment.first_offset, segment.end_offset)
        if segment.complete:
            return sum(end - start for start, end in spans)
        # A carried-forward segment: which offsets it holds is read once (files never
        # change; a new generation is a new key even under a reused plain name).
        key = (segment.path, segment.generation, segment.entry.rows)
        offsets = self._offsets.get(key)
        if offsets is None:
            offsets = await asyncio.to_thread(carry.offsets_of, segment)
            self._offsets[key] = offsets
            if len(self._offsets) > _OFFSETS_CACHED:
                self._offsets.pop(next(iter(self._offsets)))
        return count_in(spans, offsets)

    async def acked_by_all(self, partition: Partition) -> AckedByAll | None:
        """What every subscription of `partition` acked, with its newest stored message
        counted as needed; None when it has no subscription (or an unreadable cursor)."""
        try:
            cursors = await partition.cursors()
        except DataLoss as exc:
            log.error("interest retention skipped", partition=str(partition.id), error=str(exc))
            return None
        acked = AckedByAll.of(cursors.values())
        sealed = partition.segment_log
        if acked is not None and partition.wal.durable_offset <= sealed.end_offset:
            acked = acked.without(sealed.end_offset - 1)
        return acked

    async def reclaim(self, partition: Partition) -> ReclaimPlan:
        """Drop and carry forward what every subscription of `partition` has acked."""
        acked = await self.acked_by_all(partition)
        if acked is None:
            return ReclaimPlan()
        async with partition.seal_lock:
            sealed = partition.segment_log
            segments = self._reclaimable(partition)
            counts = [await self._needed_count(s, acked) for s in segments]
            plan = plan_reclaim(segments, counts, acked, self._limits)
            if not plan:
                return plan
            written: list[Segment] = []
            for rewrite in plan.rewrites:
                new = await asyncio.to_thread(
                    carry.write_carried,
                    partition.id.partition,
                    partition.directory,
                    rewrite,
                    sealed.local_path,
                )
                written.append(new)
            old = [*plan.drop, *(m for r in plan.rewrites for m in r.members)]
            swap = Swap(
                partition=partition.id.partition,
                removed=tuple(s.entry for s in old),
                added=tuple(s.entry for s in written),
                expire_files=tuple(s.entry.file for s in old),
                delete_after_us=self._delete_after_us(),
                floor=plan.drop[-1].end_offset if plan.drop else None,
            )
            # The manifest first: if writing it fails, what reads see is unchanged
            # (the new files are just unused until a restart finds them).
            await self._record(partition.id.stream, swap)
            for _ in plan.drop:
                sealed.remove_first()
            for rewrite, new in zip(plan.rewrites, written, strict=True):
                sealed.replace(rewrite.members, new)
        stream = partition.id.stream
        freed = sum(s.entry.size_bytes for s in old) - sum(s.entry.size_bytes for s in written)
        metrics.INTEREST_FREED_BYTES.labels(stream).inc(max(freed, 0))
        metrics.CARRIED_MESSAGES.labels(stream).inc(sum(s.entry.rows for s in written))
        log.info(
            "interest retention",
            partition=str(partition.id),
            dropped=[s.path.name for s in plan.drop],
            carried=[
                f"{[m.path.name for m in r.members]} -> {s.path.name} ({s.entry.rows} rows)"
                for s, r in zip(written, plan.rewrites, strict=True)
            ],
            start_offset=sealed.floor if plan.drop else None,
        )
        return plan

    async def promote_ready(self, partition: Partition, manifest: Manifest, now_us: int) -> int:
        """Give staged segments whose replaced plain files are past their grace period the
        plain name; returns how many."""
        promoted = 0
        number = partition.id.partition
        for segment in partition.segment_log.segments:
            if not segment.entry.staged:
                continue
            if _waiting_on(manifest, number, segment, now_us):
                continue
            async with partition.seal_lock:
                if segment not in partition.segment_log.segments:
                    continue  # rewritten again meanwhile
                plain = await asyncio.to_thread(carry.promote, partition.directory, segment)
                swap = Swap(
                    partition=number,
                    removed=(segment.entry,),
                    added=(plain.entry,),
                    expire_files=(segment.entry.file,),
                    delete_after_us=self._delete_after_us(),
                    unexpire_files=(plain.entry.file,),
                )
                await self._record(partition.id.stream, swap)
                partition.segment_log.replace([segment], plain)
            log.info("carried segment promoted", partition=str(partition.id), file=plain.path.name)
            promoted += 1
        return promoted


def _waiting_on(manifest: Manifest, partition: int, segment: Segment, now_us: int) -> bool:
    """Whether a plain file overlapping `segment`'s range is still in its grace period."""
    prefix = f"{partition_dir_name(partition)}/"
    for expired in manifest.expired:
        if not expired.file.startswith(prefix) or expired.delete_after_us <= now_us:
            continue
        bounds = parse_segment_name(expired.file[len(prefix) :])
        if bounds is None:
            continue  # a staged file: invisible to a plain read, never in the way
        first, last = bounds
        if first <= segment.last_offset and segment.first_offset <= last:
            return True
    return False
