"""The ledger auditor: re-replication of partitions nobody writes to.

An open replicated partition log replaces a member that stays unregistered by a
spare itself (`PartitionLog._repair_loop`), but a partition nobody writes to has
no open log, so a node loss would leave its ledgers short of R copies for good.
Every `AUDIT_INTERVAL_S` each router reads the ledger lists in etcd
(`tamto_common.ledgers`), keeps those of the partitions it owns by placement (the
rule the hand-back loop uses), and opens (`Partitions.get`) a few of those whose
ensemble names a storage node unregistered for longer than `REREPLICATE_AFTER_S`
(the router setting `rereplicate_after_s`; a shorter one also shortens the period):
the open log's repair then copies the partition to a spare and records it.
At most `OPENS_PER_ROUND` partitions are opened per round, so losing a node of a
big cluster does not open every partition at once.

The auditor's last view also counts, for the gauge
`tamto_router_under_replicated_ledgers`, the owned partitions that are not open
here and have such a ledger (open ones are counted by their logs).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Final

import aetcd
import structlog

from tamto_common.ledgers import LedgerList, list_ledgers
from tamto_router.replica_catch_up import REREPLICATE_AFTER_S

log = structlog.get_logger(__name__)

#: How often the ledger lists are read again.
AUDIT_INTERVAL_S: Final = 5.0
#: How many idle partitions one round opens at most.
OPENS_PER_ROUND: Final = 4


def audit_interval_s(after_s: float) -> float:
    """How often the ledger lists are read when a node is re-replicated after `after_s`:
    `AUDIT_INTERVAL_S`, or half of a shorter `after_s` (a node is seen down in one round
    and its partitions opened in a later one, so the period must be well below it)."""
    return min(AUDIT_INTERVAL_S, after_s / 2)


class LedgerAudit:
    """Finds the owned, idle partitions with a ledger replica that stays down.

    Args:
        etcd: where the ledger lists are.
        owns: whether this router owns (stream, partition) by placement.
        registered: the storage instance ids registered now.
        is_open: whether this router has (stream, partition) open (its log repairs it).
        open_partition: opens (stream, partition) here (`Partitions.get`).
        after_s: how long a member is unregistered before its partitions are opened.
    """

    def __init__(
        self,
        etcd: aetcd.Client,
        owns: Callable[[str, int], bool],
        registered: Callable[[], set[str]],
        is_open: Callable[[str, int], bool],
        open_partition: Callable[[str, int], Awaitable[object]],
        after_s: float = REREPLICATE_AFTER_S,
        per_round: int = OPENS_PER_ROUND,
    ) -> None:
        self._etcd = etcd
        self._owns = owns
        self._registered = registered
        self._is_open = is_open
        self._open = open_partition
        self._after_s = after_s
        self._per_round = per_round
        #: When each storage node was first seen unregistered (reset when it is back).
        self._down_since: dict[str, float] = {}
        #: Owned partitions not open here with a ledger naming an unregistered node.
        self.idle_under_replicated: set[tuple[str, int]] = set()

    async def run(self, interval_s: float = AUDIT_INTERVAL_S) -> None:
        """Audit every `interval_s` until cancelled; a failed round is logged and retried."""
        while True:
            await asyncio.sleep(interval_s)  # a period, not a wait for a condition
            try:
                await self.audit_once()
            except Exception as exc:  # etcd hiccup, a refused open: the next round
                log.warning("ledger audit round failed", error=str(exc))

    async def audit_once(self) -> list[tuple[str, int]]:
        """One round: update the view and open up to `per_round` partitions whose
        ensemble has a member down longer than `after_s`; returns those opened."""
        lists = await list_ledgers(self._etcd)
        live = self._registered()
        now = time.monotonic()
        named = {node for ledgers in lists for x in ledgers.ledgers for node in x.ensemble}
        down = named - live
        self._down_since = {n: self._down_since.get(n, now) for n in down}
        long_down = {n for n, since in self._down_since.items() if now - since >= self._after_s}
        short: set[tuple[str, int]] = set()
        due: list[tuple[str, int]] = []
        for ledgers in self._candidates(lists, live):
            key = (ledgers.stream, ledgers.partition)
            if self._is_open(*key):
                continue  # its log repairs it and counts it
            short.add(key)
            if _names_any(ledgers, long_down) and _can_open(ledgers, live):
                due.append(key)
        self.idle_under_replicated = short
        opened = []
        for stream, partition in due[: self._per_round]:
            try:
                await self._open(stream, partition)
            except Exception as exc:  # no quorum, moved meanwhile: the next round
                log.warning(
                    "under-replicated partition not opened for re-replication",
                    stream=stream,
                    partition=partition,
                    error=str(exc),
                )
                continue
            log.info(
                "opened an idle under-replicated partition to re-replicate it",
                stream=stream,
                partition=partition,
            )
            opened.append((stream, partition))
        return opened

    def _candidates(self, lists: Iterable[LedgerList], live: set[str]) -> list[LedgerList]:
        """Owned partitions with a replicated ledger naming an unregistered node that
        still has a registered replica to copy from."""
        found = []
        for ledgers in lists:
            short = [
                x
                for x in ledgers.ledgers
                if len(x.ensemble) > 1 and not set(x.ensemble) <= live and set(x.ensemble) & live
            ]
            if short and self._owns(ledgers.stream, ledgers.partition):
                found.append(ledgers)
        return found


def _can_open(ledgers: LedgerList, live: set[str]) -> bool:
    """Whether an owner could open the partition with the `live` nodes: its last
    ledger's ack quorum must be live, and, while that ledger is open (its owner
    died or left), R - Q + 1 of its replicas to recover its end (an entry acked by
    Q replicas is on one of them). Otherwise opening would fail every round, each
    time using up an epoch, and the partition waits for its nodes instead."""
    last = ledgers.current
    if last is None:
        return False
    up = len(set(last.ensemble) & live)
    if up < last.ack_quorum:
        return False
    return not last.is_open or up >= len(last.ensemble) - last.ack_quorum + 1


def _names_any(ledgers: LedgerList, nodes: set[str]) -> bool:
    """Whether a ledger of the partition names one of `nodes`."""
    return any(node in nodes for x in ledgers.ledgers for node in x.ensemble)
