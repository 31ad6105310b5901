"""All partitions of a storage node, opened lazily under one data directory.

The store also keeps one `StreamManifest` per stream and owns the `Sealer`
(when given `SealOptions`): started with `start_sealer`, stopped by `close`,
which then seals everything left so a clean shutdown leaves the WAL tail in
segments too.

When a partition loads, its segment files and the manifest are reconciled: a
segment renamed into place just before a crash, but not yet recorded, is
recorded now; files below the manifest's retention floor, and files a
carried-forward segment replaced, are queued for deletion.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import replace
from pathlib import Path

import structlog

from tamto_common.errors import InvalidArgument, Unavailable
from tamto_common.names import check_name
from tamto_protocol.segment import ExpiredFile, Manifest
from tamto_storage.manifest import StreamManifest
from tamto_storage.model import PartitionId, PartitionOffsets
from tamto_storage.partition import Partition
from tamto_storage.publisher import Publisher
from tamto_storage.sealer import RetentionFor, Sealer, SealOptions, StoreView
from tamto_storage.segment_reads import DecodedGroups
from tamto_storage.wal import WalOptions

log = structlog.get_logger(__name__)

MAX_PARTITIONS = 100_000


def partition_dir(data_dir: Path, pid: PartitionId) -> Path:
    """Where a partition lives: ``<data-dir>/streams/<stream>/partition=<p>`` (DESIGN.md §6)."""
    return data_dir / "streams" / pid.stream / f"partition={pid.partition}"


def partition_id(stream: str, partition: int) -> PartitionId:
    """A validated partition id; raises InvalidArgument for a bad name or number."""
    check_name("stream", stream)
    if not 0 <= partition < MAX_PARTITIONS:
        raise InvalidArgument(f"partition must be in 0-{MAX_PARTITIONS - 1}, got {partition}")
    return PartitionId(stream, partition)


def shrunk_partitions(before: Manifest, after: Manifest) -> list[int]:
    """Partitions whose start rose or whose segments were removed or replaced."""
    kept = {s.file for s in after.segments}
    changed = {s.partition for s in before.segments if s.file not in kept}
    changed |= {
        p for p, start in after.start_offsets.items() if start > before.start_offsets.get(p, 0)
    }
    return sorted(changed)


class PartitionStore(StoreView):
    """Opens each partition once, on first use, and closes them all on `close`."""

    def __init__(
        self,
        data_dir: Path,
        options: WalOptions,
        options_for: Callable[[str, WalOptions], Awaitable[WalOptions]] | None = None,
        *,
        seal_options: SealOptions | None = None,
        retention_for: RetentionFor | None = None,
        clock: Callable[[], float] = time.time,
        decoded_groups: DecodedGroups | None = None,
        publisher: Publisher | None = None,
    ) -> None:
        """`options` are the defaults; `options_for(stream, defaults)`, when given,
        decides a stream's own (its durability policy) as its partitions open.
        `seal_options` enable sealing; `retention_for(stream)` gives a stream's
        (retention_ms, retention_bytes); `clock` is the wall clock retention uses;
        `decoded_groups`, shared by every partition, keeps decoded segment row
        groups for reads that continue where the last one stopped; `publisher`
        commits sealed segments to the cluster's segment store (None: there is none
        besides the data directory)."""
        self._data_dir = data_dir
        self._options = options
        self._options_for = options_for
        # One loading task per partition: concurrent first uses share it.
        self._partitions: dict[PartitionId, asyncio.Task[Partition]] = {}
        self._manifests: dict[str, asyncio.Task[StreamManifest]] = {}
        self._clock = clock
        self._decoded_groups = decoded_groups
        self._publisher = publisher
        self._sealer = (
            Sealer(self, seal_options, retention_for, clock, publisher)
            if seal_options is not None
            else None
        )
        self._closed = False
        #: Told (stream, partition, start) after a manifest change removed or rewrote
        #: segments of a partition: what was readable there may be gone (routers drop
        #: their cached batches; docs/segments.md, "The readable range").
        self.on_range_shrunk: Callable[[str, int, int], Awaitable[None]] | None = None

    @property
    def data_dir(self) -> Path:
        return self._data_dir

    @property
    def publisher(self) -> Publisher | None:
        """What commits sealed segments to the cluster's segment store, if there is one."""
        return self._publisher

    @property
    def sealer(self) -> Sealer | None:
        """The sealer, when sealing is enabled."""
        return self._sealer

    def start_sealer(self) -> None:
        """Start the background sealing loop (stopped by `close`)."""
        if self._sealer is not None:
            self._sealer.start()

    def stream_dir(self, stream: str) -> Path:
        return self._data_dir / "streams" / stream

    def loaded(self) -> list[Partition]:
        """The partitions opened so far (those whose load succeeded).

        Safe to call from another thread (the metrics server's): it iterates a
        copy, taken in one step, of the partitions the event loop may be adding.
        """
        return [
            t.result()
            for t in list(self._partitions.values())
            if t.done() and not t.cancelled() and t.exception() is None
        ]

    def unsealed_bytes(self) -> int:
        """Durable bytes of the open partitions that are not sealed yet (the
        `tamto_storage_unsealed_bytes` gauge; read from the metrics server's thread)."""
        return sum(partition.unsealed_bytes for partition in self.loaded())

    async def _manifest(self, stream: str) -> StreamManifest:
        task = self._manifests.get(stream)
        if task is None:
            task = asyncio.create_task(StreamManifest.load(self.stream_dir(stream)))
            self._manifests[stream] = task
        try:
            return await asyncio.shield(task)
        except Exception:
            if task.done() and self._manifests.get(stream) is task:
                del self._manifests[stream]
            raise

    def manifest(self, stream: str) -> Manifest | None:
        """The stream's current manifest, if it was loaded."""
        task = self._manifests.get(stream)
        if task is None or not task.done() or task.cancelled() or task.exception() is not None:
            return None
        return task.result().current

    async def manifest_update(self, stream: str, change: Callable[[Manifest], Manifest]) -> None:
        manifest = await self._manifest(stream)
        before = manifest.current
        await manifest.update(change)
        if self.on_range_shrunk is None:
            return
        for partition in shrunk_partitions(before, manifest.current):
            try:
                await self.on_range_shrunk(
                    stream, partition, manifest.current.start_offsets.get(partition, 0)
                )
            except Exception as exc:  # the bus is down: routers learn it on their next read
                log.warning("range change not announced", stream=stream, error=str(exc))

    async def get(self, stream: str, partition: int) -> Partition:
        """The partition, loaded (and its WAL recovered) on first use."""
        pid = partition_id(stream, partition)
        if self._closed:
            raise Unavailable("storage is shutting down")
        task = self._partitions.get(pid)
        if task is None:
            task = asyncio.create_task(self._load(pid), name=f"load partition {pid}")
            self._partitions[pid] = task
        try:
            return await asyncio.shield(task)
        except Exception:
            if task.done() and self._partitions.get(pid) is task:
                del self._partitions[pid]  # a failed load is retried by the next caller
            raise

    async def _load(self, pid: PartitionId) -> Partition:
        options = self._options
        if self._options_for is not None:
            options = await self._options_for(pid.stream, options)
        manifest = await self._manifest(pid.stream)
        floor = manifest.current.start_offsets.get(pid.partition, 0)
        partition = await Partition.load(
            pid,
            partition_dir(self._data_dir, pid),
            options,
            floor=floor,
            decoded_groups=self._decoded_groups,
            recorded=manifest.current.for_partition(pid.partition),
        )
        if self._publisher is not None:
            self._publisher.attach(partition)  # reclaimed segments read from the store
        await manifest.update(lambda m: _reconcile(m, partition, self._grace_deadline_us()))
        return partition

    async def start_partition_at(
        self, stream: str, number: int, epoch: int, offset: int
    ) -> PartitionOffsets:
        """Start the empty partition at `offset` (`Partition.start_at`), its floor
        recorded in the stream's manifest first, as retention records one."""
        partition = await self.get(stream, number)

        async def record_floor() -> None:
            await self.manifest_update(
                stream,
                lambda m: replace(m, start_offsets={**m.start_offsets, number: offset}),
            )

        return await partition.start_at(epoch, offset, record_floor)

    def _grace_deadline_us(self) -> int:
        grace = self._sealer.options.retention_grace_s if self._sealer is not None else 0.0
        return int((self._clock() + grace) * 1e6)

    async def release_stream(self, stream: str) -> None:
        """Seal and close a deleted stream's open partitions, and forget them.

        Called on the `stream.deleted` bus event (its definition is gone from
        etcd). What each holds unsealed is sealed now, the WAL files the segments
        cover are removed (no read tail is kept for a deleted stream), it is
        closed (its WAL writer stopped, its files released), and it leaves
        `loaded()`: neither the sealer nor the `tamto_storage_unsealed_bytes`
        gauge counts it any more (it would otherwise wait out the seal age, and
        stay open for good). A sealing round in progress finishes first.

        The data itself stays for the grace period: `tamto_storage.reaper`
        removes it afterwards (the name cannot be created again until then).
        Used again meanwhile, a partition loads anew.
        """
        check_name("stream", stream)
        async with AsyncExitStack() as stack:
            if self._sealer is not None:
                await stack.enter_async_context(self._sealer.round_lock)
            tasks = {p: t for p, t in self._partitions.items() if p.stream == stream}
            for pid, task in tasks.items():
                try:
                    partition = await task
                except Exception:  # its load failed; nothing is open
                    continue
                if self._sealer is not None:
                    await self._sealer.seal(partition)
                    # Before closing: the trim rolls to a fresh, empty WAL file so
                    # the last one can go too. An append landing after the seal
                    # stays in the WAL, recovered when the partition loads again.
                    await partition.trim_wal(0)
                await partition.close()
                # Forgotten only now: a use meanwhile must not load a second copy.
                if self._partitions.get(pid) is task:
                    del self._partitions[pid]
        log.info("deleted stream's partitions released", stream=stream, partitions=len(tasks))

    def forget_manifest(self, stream: str) -> None:
        """Drop the loaded manifest of a deleted stream whose files are being removed
        (`tamto_storage.reaper`): a stream created again under the name starts anew."""
        self._manifests.pop(stream, None)

    async def close(self) -> None:
        """Stop the sealer, flush and close every partition, then seal what is left."""
        self._closed = True
        if self._sealer is not None:
            await self._sealer.stop()
        partitions = []
        for task in list(self._partitions.values()):
            try:
                partition = await task
            except Exception:  # its load failed; the caller already saw why
                continue
            await partition.close()
            partitions.append(partition)
        if self._sealer is not None:
            for partition in partitions:
                try:
                    await self._sealer.seal(partition)
                except Exception:  # the WAL still holds it all; the next start seals it
                    log.exception("sealing on shutdown failed", partition=str(partition.id))
        self._partitions.clear()


def _reconcile(manifest: Manifest, partition: Partition, delete_after_us: int) -> Manifest:
    """The manifest with `partition`'s segments exactly as found on disk at load."""
    number = partition.id.partition
    others = tuple(s for s in manifest.segments if s.partition != number)
    mine = tuple(s.entry for s in partition.segment_log.segments)
    stream_dir = partition.directory.parent
    listed = {e.file for e in manifest.expired}
    expired = tuple(
        ExpiredFile(str(path.relative_to(stream_dir)), delete_after_us)
        for path in partition.expired_files
        if str(path.relative_to(stream_dir)) not in listed
    )
    # A file listed for deletion that is live again (a carried segment promoted
    # onto its name just before a crash) stays.
    live = {s.file for s in mine}
    kept = tuple(e for e in manifest.expired if e.file not in live)
    return replace(manifest, segments=others + mine, expired=kept + expired)
