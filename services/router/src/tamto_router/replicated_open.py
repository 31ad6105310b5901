"""How a router opens a replicated partition (replication factor R > 1) for its epoch.

The ledger's ensemble is R storage nodes. The previous open ledger is recovered from
a quorum of them (`tamto_router.quorum.recover_ledger_end`), the partition is opened
on every registered replica, and the replicas at the log's end take appends from the
start; the log catches the others up (`tamto_router.replica_catch_up`), and replaces a
member that stays down by a spare (re-replication). docs/cluster.md sections 2-3.
`tamto_router.partitions` claims the partition and records the ledger.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import NamedTuple

import aetcd
import structlog

from tamto_common.ledgers import Ledger, LedgerList, replace_in_ledgers
from tamto_common.ring import HashRing, partition_key
from tamto_common.streams import StreamDef
from tamto_router.model import LogBounds
from tamto_router.quorum import Recovery, no_quorum, recover_ledger_end
from tamto_router.replica_catch_up import Rereplicate
from tamto_router.storage_client import StorageClient

log = structlog.get_logger(__name__)

#: A replicated partition's ensemble (its current ledger's, or R live storage nodes
#: for a partition with none) and clients of the registered members of it.
ReplicasFor = Callable[
    [str, int, LedgerList, int], tuple[tuple[str, ...], dict[str, StorageClient]]
]

#: How long a claim waits for each replica to open the partition.
REPLICA_OPEN_TIMEOUT_S = 3.0


class OpenedReplicas(NamedTuple):
    """A replicated partition opened for an epoch: the replica it reads from, the
    replicas at the log's end (they take appends), the ack quorum, the log's bounds
    and the ledger's ensemble."""

    reader: str
    at_end: dict[str, StorageClient]
    quorum: int
    bounds: LogBounds
    ensemble: tuple[str, ...]


class ReplicatedOpener:
    """Opens replicated partitions; `replicas_for` names a partition's ensemble and
    clients of its registered members, `storage_clients` (when given) every registered
    storage node, the spares re-replication draws from."""

    def __init__(
        self,
        etcd: aetcd.Client,
        replicas_for: ReplicasFor,
        storage_clients: Callable[[], dict[str, StorageClient]] | None,
        rereplicate_after_s: float,
    ) -> None:
        self._etcd = etcd
        self._replicas_for = replicas_for
        self._storage_clients = storage_clients
        #: How long an ensemble member stays unregistered before a spare replaces it.
        self._rereplicate_after_s = rereplicate_after_s

    def registered(
        self, ledgers: LedgerList, definition: StreamDef
    ) -> tuple[tuple[str, ...], dict[str, StorageClient], int]:
        """A replicated partition's ensemble, clients of its registered members and ack
        quorum; Unavailable (no quorum) when fewer members than the quorum are registered."""
        ensemble, clients = self._replicas_for(
            ledgers.stream, ledgers.partition, ledgers, definition.replication_factor
        )
        current = ledgers.current
        quorum = current.ack_quorum if current is not None else definition.ack_quorum
        if len(clients) < quorum:
            raise no_quorum(len(clients), len(ensemble), quorum)
        return ensemble, clients, quorum

    def client_for(
        self, stream: str, partition: int, epoch: int, ensemble: tuple[str, ...], quorum: int
    ) -> Callable[[str], StorageClient | None]:
        """How a replicated log reaches a member of its ledger's ensemble now (None
        while it is not registered), to catch it up."""
        storage_clients = self._storage_clients
        if storage_clients is not None:
            return lambda node: storage_clients().get(node)
        replicas_for = self._replicas_for
        recorded = LedgerList(stream, partition, (Ledger(epoch, ensemble, quorum, 0),))

        def client_for(node: str) -> StorageClient | None:
            return replicas_for(stream, partition, recorded, len(ensemble))[1].get(node)

        return client_for

    def rereplicate(self, stream: str, partition: int) -> Rereplicate | None:
        """How a replicated log of the partition replaces a member that stays down: by
        the first registered storage node outside its ensemble after the partition's
        hash on the storage ring, recorded in every ledger of the partition."""
        storage_clients = self._storage_clients
        if storage_clients is None:
            return None

        def spare_for(ensemble: tuple[str, ...]) -> str | None:
            spares = set(storage_clients()) - set(ensemble)
            return HashRing(spares).owner(partition_key(stream, partition)) if spares else None

        async def record(old: str, new: str) -> None:
            await replace_in_ledgers(self._etcd, stream, partition, old, new)

        return Rereplicate(spare_for, record, self._rereplicate_after_s)

    async def open(self, ledgers: LedgerList, epoch: int, definition: StreamDef) -> OpenedReplicas:
        """Open a replicated partition for `epoch`: recover the previous open ledger
        from a quorum of its replicas and open the partition on every registered
        replica. The caller records the new ledger (same ensemble: its members hold the
        partition's earlier entries); the log catches up the replicas not at its end."""
        stream, partition = ledgers.stream, ledgers.partition
        ensemble, clients, quorum = self.registered(ledgers, definition)
        current = ledgers.current
        recovery: Recovery | None = None
        if current is not None and current.is_open:
            recovery = await recover_ledger_end(
                clients, quorum, stream, partition, epoch, ensemble_size=len(ensemble)
            )
        end = recovery.end if recovery is not None else None
        diverged = recovery.diverged if recovery is not None else frozenset()

        async def open_one(client: StorageClient) -> LogBounds:
            return await asyncio.wait_for(
                client.open_partition(stream, partition, epoch), REPLICA_OPEN_TIMEOUT_S
            )

        nodes = list(clients)
        answers = await asyncio.gather(
            *(open_one(clients[n]) for n in nodes), return_exceptions=True
        )
        opened = {n: b for n, b in zip(nodes, answers, strict=True) if isinstance(b, LogBounds)}
        if not opened:
            raise no_quorum(0, len(ensemble), quorum)
        wanted = end + 1 if end is not None else max(b.next_offset for b in opened.values())
        at_end = {
            n: clients[n]
            for n in ensemble
            if n in opened and n not in diverged and opened[n].next_offset == wanted
        }
        if recovery is not None:  # the catch-up cuts a stale tail ending there
            at_end = await recovery.holding_log(at_end, stream, partition)
        for n in nodes:
            if n not in at_end:
                # It takes no appends until the log caught it up in the background.
                log.warning(
                    "replica not at the log's end: caught up before it takes appends",
                    stream=stream,
                    partition=partition,
                    replica=n,
                    answer=repr(answers[nodes.index(n)]),
                    wanted_next_offset=wanted,
                    differs_from_log=n in diverged,
                )
        if len(at_end) < quorum:
            raise no_quorum(len(at_end), len(ensemble), quorum)
        reader = next(iter(at_end))
        return OpenedReplicas(reader, at_end, quorum, opened[reader], ensemble)
