"""Removing what is left of deleted streams, once their grace period has passed.

A deleted stream's remains wait out ``--stream-delete-grace-ms`` (5 min by
default) from its deletion, as its deletion record in etcd says
(`tamto_common.deletions`: the timer is in etcd, so it survives restarts of any
process); Spark jobs and other readers of the store that planned before the
deletion finish meanwhile, and an operator can still copy the files out. Then
every storage node's reaper, each round, for each due record:

1. the node's own copy, by each node the record names: the partitions are
   released if anything opened them again, the stream's directory (WAL files,
   local segments, cursors, the stream manifest) and its cached store objects
   are removed, and the node takes itself off the record's ``pending`` list;
2. the shared remains, by whichever node comes first (each step is idempotent,
   so two doing it at once, or one finishing what a crashed one began, is
   harmless): the stream's Iceberg table is dropped from the catalog and its
   metadata files removed; its objects in the segment store (segments and
   manifests) are removed; its keys in etcd (ledgers, owners, owner epochs,
   placement moves) are deleted; then the record says so (``shared_done``).

No node publishes a deleted stream's segments to the store (the publisher's
`designated` check reads the record), so nothing puts objects back.

The last of them deletes the record, and the name can be created again (an empty
stream at offset 0). A node that was down does its part when it is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import Callable

import aetcd
import structlog

from tamto_common.deletions import (
    StreamDeletion,
    read_deletions,
    shared_removed,
    stream_prefixes,
    update_deletion,
    without_node,
)
from tamto_common.durable import fsync_dir
from tamto_storage.publisher import Publisher
from tamto_storage.store import PartitionStore

log = structlog.get_logger(__name__)


class StreamReaper:
    """Removes deleted streams' remains after their grace period (see the module)."""

    def __init__(
        self,
        etcd: aetcd.Client,
        store: PartitionStore,
        publisher: Publisher | None,
        node: str,
        grace_s: float,
        interval_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._etcd = etcd
        self._store = store
        self._publisher = publisher
        self._node = node
        self._grace_us = int(grace_s * 1e6)
        self._interval_s = interval_s
        self._clock = clock
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start reaping in the background (stopped by `stop`)."""
        self._task = asyncio.create_task(self._run(), name="stream-reaper")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            try:
                await self.reap_due()
            except Exception as exc:  # etcd or the store is down: the next round retries
                log.warning("deleted streams not removed yet", error=str(exc))
            await asyncio.sleep(self._interval_s)

    async def reap_due(self) -> list[str]:
        """One round: remove what is due of every deleted stream; returns the streams
        this node did something for."""
        now_us = int(self._clock() * 1e6)
        done = []
        for record in await read_deletions(self._etcd):
            if not record.due(now_us, self._grace_us):
                continue
            current: StreamDeletion | None = record
            if self._node in record.pending:
                await self.remove_local(record.stream)
                current = await update_deletion(self._etcd, record.stream, without_node(self._node))
            if current is not None and not current.shared_done:
                await self.remove_shared(record.stream)
                await update_deletion(self._etcd, record.stream, shared_removed)
            done.append(record.stream)
        return done

    async def remove_shared(self, stream: str) -> None:
        """Drop the Iceberg table, remove the store's objects, delete the etcd keys."""
        publisher = self._publisher
        if publisher is not None:
            if publisher.tables is not None:
                await asyncio.to_thread(publisher.tables.drop, stream)
            await asyncio.to_thread(publisher.store.delete_stream, stream)
        for prefix in stream_prefixes(stream):
            await self._etcd.delete_prefix(prefix)
        log.info("deleted stream's shared data removed", stream=stream)

    async def remove_local(self, stream: str) -> None:
        """Remove this node's copy: WAL, segments, cursors, manifest, cached objects."""
        await self._store.release_stream(stream)
        self._store.forget_manifest(stream)
        if self._publisher is not None:
            self._publisher.forget(stream)
        directory = self._store.stream_dir(stream)

        def remove() -> None:
            if directory.exists():
                shutil.rmtree(directory)
                fsync_dir(directory.parent)

        await asyncio.to_thread(remove)
        log.info("deleted stream's local data removed", stream=stream, directory=str(directory))
