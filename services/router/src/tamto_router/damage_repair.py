"""Repair of a replica whose copy is damaged, from a healthy one (replicated logs).

A replica whose copy is damaged (a read or its sealing met a segment or WAL frame
failing its checksum: DATA_LOSS naming the file and the range) is repaired from a
healthy one (`repair_damage`, in the background): the range is read from a
replica that takes appends and reads it intact and sent to the damaged node
(Storage `RepairRange`), which checks the copy and installs it in place of the
damaged file. Meanwhile `read` serves that range from the healthy replica, so a
consumer gets DATA_LOSS only when no replica reads it (docs/cluster.md section 2).

`DamageRepair` is the part of `tamto_router.partition_log.PartitionLog` that does
it; the log's state it works on is declared here.
"""

from __future__ import annotations

import asyncio
import time

import structlog

from tamto_common.errors import DataLoss, TamtoError, Unavailable, damaged_offsets
from tamto_router.model import Batch
from tamto_router.quorum import read_entries
from tamto_router.storage_client import StorageClient

log = structlog.get_logger(__name__)

#: Most Arrow bytes one repair of a damaged range sends (every hop allows 64 MiB); a
#: larger range stays served from a healthy replica until repaired offline.
MAX_REPAIR_BYTES = 48 * 1024 * 1024
#: How long after a failed repair of a damaged range it is tried again.
REPAIR_RETRY_S = 10.0


class DamageRepair:
    """Repairs damaged ranges of a partition's replicas (a mixin of `PartitionLog`)."""

    stream: str
    partition: int
    epoch: int
    durable_offset: int
    replicas: dict[str, StorageClient] | None
    _fresh: tuple[str, ...]
    #: Damaged ranges (node, first offset) by when their last repair started.
    _damage_tried: dict[tuple[str, int], float]
    _damage_repairs: set[asyncio.Task[None]]

    def _node_of(self, client: StorageClient) -> str | None:
        """The replica `client` calls (replicated logs only)."""
        return next((n for n, c in (self.replicas or {}).items() if c is client), None)

    def _other_replicas(self, node: str) -> list[tuple[str, StorageClient]]:
        """The replicas taking appends but `node`, those that answered the last append first."""
        assert self.replicas is not None
        fresh = [n for n in self._fresh if n in self.replicas]
        order = [*fresh, *(n for n in self.replicas if n not in fresh)]
        return [(n, self.replicas[n]) for n in order if n != node]

    def repair_damage(self, node: str, client: StorageClient, exc: DataLoss) -> None:
        """Repair in the background the range of replica `node` that `exc` names damaged,
        from a replica that reads it intact (replicated logs; one try per range at a
        time, a failed one tried again after `REPAIR_RETRY_S`)."""
        damaged = damaged_offsets(str(exc))
        if damaged is None or self.replicas is None:
            return
        key = (node, damaged[0])
        now = time.monotonic()
        tried = self._damage_tried.get(key)
        if tried is not None and now - tried < REPAIR_RETRY_S:
            return
        self._damage_tried[key] = now
        task = asyncio.create_task(
            self._repair_range(node, client, *damaged),
            name=f"repair-damage-{self.stream}/{self.partition}-{node}",
        )
        self._damage_repairs.add(task)
        task.add_done_callback(self._damage_repairs.discard)

    async def _repair_range(
        self, node: str, client: StorageClient, first: int, last: int | None
    ) -> None:
        """Read offsets `first`..`last` (None: WAL damage, to the end of `node`'s log) from a
        healthy replica and have `node` install them in place of its damaged file."""
        try:
            end = last + 1 if last is not None else await self._damaged_log_end(client)
            batches, source = await self._intact_copy(node, first, end)
            size = sum(len(b.arrow_ipc) for b in batches)
            if size > MAX_REPAIR_BYTES:
                raise Unavailable(
                    f"the range holds {size} bytes, more than {MAX_REPAIR_BYTES} repaired "
                    "online: `tamto storage repair` it with the node stopped"
                )
            aside = await client.repair_range(
                self.stream, self.partition, self.epoch, first, batches
            )
        except Exception as exc:  # tried again when the range is met again
            log.warning(
                "damaged replica not repaired yet",
                stream=self.stream,
                partition=self.partition,
                replica=node,
                offsets=f"{first}-{'' if last is None else last}",
                error=str(exc),
            )
            return
        self._damage_tried.pop((node, first), None)
        log.warning(
            "damaged replica repaired from a healthy one",
            stream=self.stream,
            partition=self.partition,
            replica=node,
            healthy=source,
            offsets=f"{first}-{end - 1}",
            damaged_file=aside,
        )

    async def _damaged_log_end(self, client: StorageClient) -> int:
        """Where a replica with WAL damage ends its log: it is repaired up to there, which
        must be durable on the log (never copy what was not acknowledged)."""
        end = (await client.open_partition(self.stream, self.partition, self.epoch)).next_offset
        if end > self.durable_offset:
            raise Unavailable(f"its log ends at {end}, past the durable end {self.durable_offset}")
        return end

    async def _intact_copy(self, node: str, first: int, end: int) -> tuple[list[Batch], str]:
        """The entries [`first`, `end`) as a replica other than `node` reads them from its
        own files, and which one."""
        for source, replica in self._other_replicas(node):
            try:
                batches = [
                    batch
                    async for part in read_entries(
                        replica,
                        self.stream,
                        self.partition,
                        first,
                        end,
                        what=f"repair of {node}",
                        from_cache=False,
                    )
                    for batch in part
                ]
            except TamtoError:
                continue
            return batches, source
        raise Unavailable(f"no other replica reads offsets {first}-{end - 1} intact")
