"""The partitions this router owns, claimed on first use through etcd."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import aetcd
import structlog

from tamto_common.errors import Unavailable
from tamto_router.ownership import Claim, claim_partition, release_partition
from tamto_router.partition_log import PartitionLog
from tamto_router.storage_client import StorageClient

log = structlog.get_logger(__name__)


class Partitions:
    """Finds or claims the `PartitionLog` for (stream, partition)."""

    def __init__(
        self,
        etcd: aetcd.Client,
        lease: Callable[[], Any],
        instance: str,
        storage_for: Callable[[str, int], StorageClient],
        claim_timeout_s: float,
    ) -> None:
        self._etcd = etcd
        self._lease = lease
        self._instance = instance
        self._storage_for = storage_for
        self._claim_timeout = claim_timeout_s
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._claims: dict[tuple[str, int], Claim] = {}
        self._locks: dict[tuple[str, int], asyncio.Lock] = {}

    async def get(self, stream: str, partition: int) -> PartitionLog:
        key = (stream, partition)
        current = self._logs.get(key)
        if current is not None and current.failure is None:
            return current
        async with self._locks.setdefault(key, asyncio.Lock()):
            current = self._logs.get(key)
            if current is not None and current.failure is None:
                return current
            if current is not None:
                await current.close()
            opened = await self._open(stream, partition)
            self._logs[key] = opened
            return opened

    async def _open(self, stream: str, partition: int) -> PartitionLog:
        deadline = time.monotonic() + self._claim_timeout
        while True:
            result = await claim_partition(
                self._etcd, self._lease(), self._instance, stream, partition
            )
            if isinstance(result, Claim):
                break
            if time.monotonic() > deadline:
                raise Unavailable(
                    f"partition {stream}/{partition} is owned by {result.owner} "
                    f"(epoch {result.epoch})"
                )
            await asyncio.sleep(0.2)  # the holder's lease expires within its TTL
        storage = self._storage_for(stream, partition)
        bounds = await storage.open_partition(stream, partition, result.epoch)
        self._claims[(stream, partition)] = result
        log.info(
            "partition claimed",
            stream=stream,
            partition=partition,
            epoch=result.epoch,
            next_offset=bounds.next_offset,
        )
        return PartitionLog(stream, partition, result.epoch, storage, bounds)

    def forget_claims(self) -> None:
        """The lease was lost, and with it every claim: reclaim on next use."""
        for partition_log in self._logs.values():
            partition_log.failure = Unavailable("ownership lease lost")
        self._claims.clear()

    async def close(self) -> None:
        for partition_log in self._logs.values():
            await partition_log.close()
        for claim in self._claims.values():
            try:
                await release_partition(self._etcd, claim)
            except Exception as exc:
                log.warning("release failed", stream=claim.stream, error=str(exc))
        self._logs.clear()
        self._claims.clear()
