"""The partitions this router owns, claimed on first use through etcd.

A claim also records where the partition's data goes: the previous owner's
ledger is closed at the end storage reports and a ledger of the new epoch is
opened (`tamto_common.ledgers`, docs/cluster.md section 1). The storage node
comes from that record, never from membership alone, once a partition has one.

A stream with replication factor R > 1 takes its own path
(`tamto_router.replicated_open`): the ledger's ensemble is R storage nodes, the
previous open ledger is recovered from a quorum of them and closed at that end, and
the log appends to every replica (docs/cluster.md sections 2-3).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aetcd
import structlog
from prometheus_client import Gauge

from tamto_common.errors import Unavailable
from tamto_common.ledgers import LedgerConflict, LedgerList, open_ledger, read_ledgers
from tamto_common.streams import DEFAULT_DEDUP_WINDOW_MS, StreamDef
from tamto_router.dedup import DedupWindow
from tamto_router.dedup_restore import restore_window
from tamto_router.metrics import OWNERSHIP_CHANGES
from tamto_router.model import LogBounds
from tamto_router.ownership import (
    Claim,
    Held,
    claim_partition,
    release_partition,
    still_held,
)
from tamto_router.partition_log import PartitionLog
from tamto_router.replica_catch_up import REREPLICATE_AFTER_S, Rereplicate
from tamto_router.replicated_open import ReplicasFor, ReplicatedOpener
from tamto_router.storage_client import StorageClient

log = structlog.get_logger(__name__)

#: Where a partition's data is: (storage instance id, its client), chosen from the
#: partition's ledger list (see `Partitions`).
StorageFor = Callable[[str, int, LedgerList], tuple[str, StorageClient]]

UNDER_REPLICATED = Gauge(
    "tamto_router_under_replicated_ledgers",
    "Open ledgers this router writes with a replica that takes no appends "
    "(down, or being caught up), plus idle partitions it owns with a ledger naming "
    "an unregistered storage node (tamto_router.ledger_audit)",
)


class Partitions:
    """Finds or claims the `PartitionLog` for (stream, partition).

    `storage_for(stream, partition, ledgers)` names the storage node of the
    partition: the node of its current ledger when it has one (or Unavailable
    naming that node when it is gone), a node from membership only for a
    partition with no ledger yet.
    """

    def __init__(
        self,
        etcd: aetcd.Client,
        lease: Callable[[], Any],
        instance: str,
        storage_for: StorageFor,
        claim_timeout_s: float,
        stream_def: Callable[[str], Awaitable[StreamDef | None]] | None = None,
        lease_valid: Callable[[], bool] = lambda: True,
        replicas_for: ReplicasFor | None = None,
        storage_clients: Callable[[], dict[str, StorageClient]] | None = None,
        placed_on: Callable[[str, int], str | None] | None = None,
        rereplicate_after_s: float = REREPLICATE_AFTER_S,
    ) -> None:
        self._etcd = etcd
        #: The other live router a partition is placed on (a move, a drain, the ring:
        #: `tamto_common.placement`), None when it is this one's: such a partition is
        #: not claimed here, so a request routed by a stale view is refused, not
        #: claimed and handed back again (an epoch and a ledger each time).
        self._placed_on = placed_on
        self._lease = lease
        self._lease_valid = lease_valid
        self._instance = instance
        self._storage_for = storage_for
        #: None: every partition lives on one storage node. With the registered storage
        #: nodes' clients (`storage_clients`), a replicated log replaces a member that
        #: stays down by a spare (re-replication).
        self._replicated = (
            ReplicatedOpener(etcd, replicas_for, storage_clients, rereplicate_after_s)
            if replicas_for is not None
            else None
        )
        self._claim_timeout = claim_timeout_s
        self._stream_def = stream_def
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._claims: dict[tuple[str, int], Claim] = {}
        self._locks: dict[tuple[str, int], asyncio.Lock] = {}
        #: The epochs this router claimed of each partition since its last log of it
        #: opened: when they are every epoch after that log's, nobody else owned the
        #: partition in between, and the log's dedup window still holds (`_open`).
        self._own_epochs: dict[tuple[str, int], set[int]] = {}
        #: Claims whose open failed before their ledger was recorded (no quorum of
        #: replicas answered, say): the next open takes the claim up again rather than
        #: claiming a new epoch, so an outage does not burn an epoch per request.
        self._unopened: dict[tuple[str, int], Claim] = {}

    async def get(self, stream: str, partition: int) -> PartitionLog:
        """The partition's log, claimed if needed; Unavailable while the ownership
        lease may have expired in etcd (`lease_valid`, see `KeptLease.valid`): then
        another router may take the partition over, so this one stops first."""
        if not self._lease_valid():
            if self._claims:
                log.warning("ownership lease not renewed in time: giving up every claim")
                self.forget_claims()
            raise Unavailable("the router's ownership lease could not be renewed in time (etcd)")
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
            elsewhere = self._placed_on(stream, partition) if self._placed_on else None
            if elsewhere is not None:
                raise Unavailable(
                    f"partition {stream}/{partition} is placed on router {elsewhere}, "
                    "not this one (a partition move or drain is being applied)"
                )
            try:
                opened = await self._open(stream, partition, current)
            except Exception as exc:
                log.warning(
                    "partition open failed", stream=stream, partition=partition, error=repr(exc)
                )
                raise
            self._logs[key] = opened
            OWNERSHIP_CHANGES.labels("claimed").inc()
            return opened

    async def _open(self, stream: str, partition: int, failed: PartitionLog | None) -> PartitionLog:
        """Claim and open the partition; `failed` is this router's failed log of it, if
        any (its dedup window is kept when nobody else owned the partition since)."""
        started = time.monotonic()
        deadline = started + self._claim_timeout
        definition = await self._replication(stream, partition)
        result = await self._claim(stream, partition, deadline)
        claimed = time.monotonic()
        own = self._own_epochs.setdefault((stream, partition), set())
        own.add(result.epoch)
        # Every epoch since the failed log's was this router's (claims whose open
        # failed included): nobody else wrote, and the log holds what its window
        # recorded. One epoch in between that another router claimed, and that
        # router's writes are missing from the window: it is rebuilt from the log.
        previous = failed.dedup if failed is not None else None
        if failed is not None and not own.issuperset(range(failed.epoch + 1, result.epoch + 1)):
            previous = None
        self._unopened[(stream, partition)] = result  # until its ledger is recorded
        # Read again under the new epoch: a claimer before this one may have opened a
        # ledger meanwhile (on the node it recorded, which this one must use too).
        ledgers = await read_ledgers(self._etcd, stream, partition)
        replicas: dict[str, StorageClient] | None = None
        quorum = 1
        ensemble: tuple[str, ...] = ()
        client_for: Callable[[str], StorageClient | None] | None = None
        rereplicate: Rereplicate | None = None
        if definition is not None:
            assert self._replicated is not None
            node, replicas, quorum, bounds, ensemble = await self._replicated.open(
                ledgers, result.epoch, definition
            )
            await self._open_ledger(ledgers, result.epoch, ensemble, quorum, bounds)
            storage = replicas[node]
            client_for = self._replicated.client_for(
                stream, partition, result.epoch, ensemble, quorum
            )
            rereplicate = self._replicated.rereplicate(stream, partition)
        else:
            node, storage = self._storage_for(stream, partition, ledgers)
            bounds = await storage.open_partition(stream, partition, result.epoch)
            await self._open_ledger(ledgers, result.epoch, (node,), 1, bounds)
        self._claims[(stream, partition)] = result
        opened = time.monotonic()
        dedup = await self._dedup_window(stream, partition, storage, bounds, previous)
        log.info(
            "partition claimed",
            stream=stream,
            partition=partition,
            epoch=result.epoch,
            next_offset=bounds.next_offset,
            dedup_ids=len(dedup) if dedup is not None else 0,
            dedup_kept=previous is not None and dedup is previous,
            storage_node=node,
            # Where a takeover spends its time: etcd, storage's open, the dedup rebuild.
            claim_s=round(claimed - started, 3),
            open_s=round(opened - claimed, 3),
            dedup_s=round(time.monotonic() - opened, 3),
        )
        opened_log = PartitionLog(
            stream,
            partition,
            result.epoch,
            storage,
            bounds,
            dedup,
            replicas,
            quorum,
            ensemble,
            client_for,
            rereplicate,
        )
        # This epoch's ledger starts at the log's end (the first ledger at 0).
        earlier = tuple(x.first_offset for x in ledgers.ledgers)
        opened_log.ledger_starts = (*earlier, bounds.next_offset if earlier else 0)
        self._own_epochs[(stream, partition)] = {result.epoch}  # the epochs after this log's
        return opened_log

    async def _replication(self, stream: str, partition: int) -> StreamDef | None:
        """The stream's definition when its partitions are replicated (None when each
        lives on one storage node), once the partition's storage is there to open.

        The storage node (a quorum of registered replicas) first: without it,
        claiming would only use up an epoch.
        """
        definition = await self._stream_def(stream) if self._stream_def else None
        before = await read_ledgers(self._etcd, stream, partition)
        if (
            definition is not None
            and definition.replication_factor > 1
            and self._replicated is not None
        ):
            self._replicated.registered(before, definition)
            return definition
        self._storage_for(stream, partition, before)
        return None

    async def _claim(self, stream: str, partition: int, deadline: float) -> Claim:
        """Claim the partition (waiting up to `deadline` for another holder's lease),
        or take up again this router's claim of it whose open failed before its ledger
        was recorded, while etcd still names this router at that epoch."""
        kept = self._unopened.pop((stream, partition), None)
        if kept is not None:
            try:
                if await still_held(self._etcd, self._instance, kept):
                    return kept
            except Exception as exc:  # etcd hiccup: claim anew below
                log.warning(
                    "claim check failed", stream=stream, partition=partition, error=repr(exc)
                )
        while True:
            try:
                result: Claim | Held = await claim_partition(
                    self._etcd, self._lease(), self._instance, stream, partition
                )
            except Exception as exc:  # etcd hiccup, or the lease was just replaced: retry
                log.warning("claim failed", stream=stream, partition=partition, error=str(exc))
                result = Held("(claim failed)", 0)
            if isinstance(result, Claim):
                return result
            if time.monotonic() > deadline:
                raise Unavailable(
                    f"partition {stream}/{partition} is owned by {result.owner} "
                    f"(epoch {result.epoch})"
                )
            await asyncio.sleep(0.2)  # the holder's lease expires within its TTL

    async def _open_ledger(
        self,
        ledgers: LedgerList,
        epoch: int,
        ensemble: tuple[str, ...],
        quorum: int,
        bounds: LogBounds,
    ) -> None:
        """Record this epoch's ledger on `ensemble` with ack quorum `quorum`, closing the
        previous owner's open ledger at the end storage reports now that `epoch`
        fenced it. A partition's first ledger starts at 0: data written before
        ledgers were recorded is on the node it was placed on."""
        stream, partition = ledgers.stream, ledgers.partition
        # From here a failure may leave this epoch's ledger recorded: the next open
        # claims a new epoch.
        self._unopened.pop((stream, partition), None)
        for attempt in range(3):
            current = ledgers.current
            first = bounds.next_offset if current is not None else 0
            previous_end = bounds.next_offset - 1 if current and current.is_open else None
            try:
                await open_ledger(
                    self._etcd,
                    stream,
                    partition,
                    epoch,
                    ensemble,
                    quorum,
                    first,
                    previous_last_offset=previous_end,
                    based_on=ledgers,
                )
                return
            except LedgerConflict as exc:
                # Changed meanwhile (a claimer of an older epoch finishing its open):
                # read it again; a stale epoch or a gap stays refused.
                if "changed meanwhile" not in str(exc) or attempt == 2:
                    raise
                ledgers = await read_ledgers(self._etcd, stream, partition)
                if ledgers.current is not None and not set(ensemble) <= set(
                    ledgers.current.ensemble
                ):
                    raise Unavailable(
                        f"partition {stream}/{partition} was placed on "
                        f"{list(ledgers.current.ensemble)} meanwhile, not on {list(ensemble)}"
                    ) from exc

    async def _dedup_window(
        self,
        stream: str,
        partition: int,
        storage: StorageClient,
        bounds: LogBounds,
        kept: DedupWindow | None = None,
    ) -> DedupWindow | None:
        """The partition's dedup window (`tamto_router.dedup_restore`), None when the
        stream keeps none."""
        definition = await self._stream_def(stream) if self._stream_def else None
        window_ms = definition.dedup_window_ms if definition else DEFAULT_DEDUP_WINDOW_MS
        if window_ms <= 0:
            return None
        return await restore_window(stream, partition, storage, bounds, window_ms * 1000, kept)

    def range_shrunk(self, stream: str, partition: int, start: int) -> None:
        """Storage removed or rewrote segments of a partition (a bus event): if this
        router has it open, its log follows the new start and forgets cached batches."""
        opened = self._logs.get((stream, partition))
        if opened is not None:
            opened.range_shrunk(start)

    def under_replicated(self) -> int:
        """How many open partition logs have a replica of their ensemble that takes no
        appends (the gauge `tamto_router_under_replicated_ledgers`)."""
        return sum(1 for x in self._logs.values() if x.failure is None and x.lagging())

    def healing(self) -> dict[tuple[str, int], dict[str, str]]:
        """The replicas each open log is healing, and why (`PartitionLog.healing`)."""
        found = {k: x.healing() for k, x in self._logs.items() if x.failure is None}
        return {k: nodes for k, nodes in found.items() if nodes}

    def appended_totals(self) -> dict[tuple[str, int], tuple[int, int]]:
        """Messages and bytes appended to each open partition log since it opened (the
        load reports of `tamto_router.balancer`)."""
        return {k: (x.appended_messages, x.appended_bytes) for k, x in self._logs.items()}

    def open_logs(self) -> list[tuple[str, int]]:
        """The (stream, partition) pairs whose log is open here (subscription metrics)."""
        return [k for k, x in self._logs.items() if x.failure is None]

    def claimed(self) -> list[tuple[str, int]]:
        """The (stream, partition) pairs this router holds a claim on."""
        return list(self._claims)

    def held(self) -> list[tuple[str, int]]:
        """`claimed`, and the claims whose open failed (or was cancelled) before their
        ledger was recorded: what the hand-back loop gives up when another router owns
        it, or a partition the gateways route elsewhere stays owned by this router for
        as long as its lease lives."""
        return [*self._claims, *(k for k in self._unopened if k not in self._claims)]

    async def hand_back(self, stream: str, partition: int) -> None:
        """Give one partition up: it is another live router's share of the ring now
        (that router came back or joined). Its log is closed and the owner key
        released, so the ring's owner claims it at once instead of waiting for it."""
        key = (stream, partition)
        async with self._locks.setdefault(key, asyncio.Lock()):
            opened = self._logs.pop(key, None)
            unopened = self._unopened.pop(key, None)
            claim = self._claims.pop(key, None) or unopened
            self._own_epochs.pop(key, None)
            if opened is not None:
                await opened.close()
            if claim is not None:
                OWNERSHIP_CHANGES.labels("handed_back").inc()
                await release_partition(self._etcd, claim)
                log.info("partition handed back", stream=stream, partition=partition)

    def forget_claims(self) -> None:
        """The lease was lost, and with it every claim: reclaim on next use."""
        for partition_log in self._logs.values():
            partition_log.failure = Unavailable("ownership lease lost")
        OWNERSHIP_CHANGES.labels("lost").inc(len(self._claims))
        self._claims.clear()
        self._unopened.clear()

    async def close(self) -> None:
        for partition_log in self._logs.values():
            await partition_log.close()
        # The open ledger stays open: the next owner closes it at the end storage
        # reports once it fenced this epoch (a batch in flight when the sender
        # stopped may or may not be stored, so this router's own count could be wrong).
        for claim in (*self._claims.values(), *self._unopened.values()):
            try:
                await release_partition(self._etcd, claim)
            except Exception as exc:
                log.warning("release failed", stream=claim.stream, error=str(exc))
        self._logs.clear()
        self._claims.clear()
        self._unopened.clear()
