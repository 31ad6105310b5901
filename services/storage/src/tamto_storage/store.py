"""All partitions of a storage node, opened lazily under one data directory."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from tamto_common.errors import InvalidArgument, Unavailable
from tamto_common.names import check_name
from tamto_storage.model import PartitionId
from tamto_storage.partition import Partition
from tamto_storage.wal import WalOptions

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


class PartitionStore:
    """Opens each partition once, on first use, and closes them all on `close`."""

    def __init__(
        self,
        data_dir: Path,
        options: WalOptions,
        options_for: Callable[[str, WalOptions], Awaitable[WalOptions]] | None = None,
    ) -> None:
        """`options` are the defaults; `options_for(stream, defaults)`, when given,
        decides a stream's own (its durability policy) as its partitions open."""
        self._data_dir = data_dir
        self._options = options
        self._options_for = options_for
        # One loading task per partition: concurrent first uses share it.
        self._partitions: dict[PartitionId, asyncio.Task[Partition]] = {}
        self._closed = False

    @property
    def data_dir(self) -> Path:
        return self._data_dir

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
        return await Partition.load(pid, partition_dir(self._data_dir, pid), options)

    async def close(self) -> None:
        """Flush and close every partition that was opened."""
        self._closed = True
        tasks = list(self._partitions.values())
        self._partitions.clear()
        for task in tasks:
            try:
                partition = await task
            except Exception:  # its load failed; the caller already saw why
                continue
            await partition.close()
