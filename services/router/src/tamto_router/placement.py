"""Where a router's partitions live: their storage nodes, and which router should own them.

Two decisions, both from what etcd says now:

- `StorageNodes`: a partition's storage nodes are the ensemble its ledgers recorded
  (never recomputed: a lapsed lease must not move a partition to nodes without its
  data); a partition never opened gets the next `replication` live storage nodes
  after its hash on the storage ring. It also keeps one client per storage
  address, so every partition on a node shares one append stream; a node run in
  this process (`local`) is called in-process instead (`tamto_router.storage_api`).
- `RouterShare`: which partitions are this router's by placement (the ring over
  routers not drained, or an operator's move, `tamto_common.placement`), and the
  hand-back loop that gives the others up after every membership or placement
  change: a router that restarts or joins gets its share again as the gateways
  route it there, and a drained router or a moved partition's old owner lets go.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable, Mapping

import structlog

from tamto_common.channels import ChannelPool
from tamto_common.errors import Unavailable
from tamto_common.ledgers import LedgerList
from tamto_common.membership import MemberDirectory
from tamto_common.placement import GoneTargets, PlacementView
from tamto_common.refreshed_view import next_change
from tamto_common.ring import HashRing, partition_key
from tamto_router.batch_cache import BatchCache
from tamto_router.storage_api import StorageApi
from tamto_router.storage_client import StorageClient

log = structlog.get_logger(__name__)

#: How often a router looks for partitions that are another router's share now,
#: besides every membership change.
HAND_BACK_CHECK_S = 2.0


def ring_successors(nodes: Iterable[str], key: str, count: int) -> tuple[str, ...]:
    """The first `count` distinct nodes after `key`'s hash on the ring over `nodes`
    (fewer when there are fewer nodes)."""
    ring, chosen = HashRing(sorted(set(nodes))), list[str]()
    while ring and len(chosen) < count:
        chosen.append(ring.owner(key))
        ring.remove(chosen[-1])
    return tuple(chosen)


class StorageNodes:
    """A partition's storage nodes and a client of each (see the module's docstring)."""

    def __init__(
        self,
        directory: MemberDirectory,
        channels: ChannelPool,
        cache: BatchCache,
        local: Mapping[str, StorageApi] | None = None,
    ):
        """`local`: the storage nodes of this process by instance id, called in-process."""
        self._directory = directory
        self._channels = channels
        self._cache = cache
        self._local = dict(local or {})
        self._clients: dict[str, StorageClient] = {}

    def _registered(self) -> dict[str, str]:
        return {m.instance_id: m.address for m in self._directory.members("storage")}

    def replicas_for(
        self, stream: str, partition: int, ledgers: LedgerList, replication: int
    ) -> tuple[tuple[str, ...], dict[str, StorageClient]]:
        """The partition's ensemble and clients of its registered members; Unavailable
        when a partition never opened finds fewer than `replication` live nodes."""
        nodes = self._registered()
        current = ledgers.current
        if current is not None:
            ensemble = current.ensemble
        else:
            ensemble = ring_successors(nodes, partition_key(stream, partition), replication)
            if len(ensemble) < replication:
                raise Unavailable(
                    f"partition {stream}/{partition} needs {replication} storage nodes, "
                    f"{len(ensemble)} are registered"
                )
        return ensemble, {n: self.client_at(nodes[n], n) for n in ensemble if n in nodes}

    def storage_for(
        self, stream: str, partition: int, ledgers: LedgerList
    ) -> tuple[str, StorageClient]:
        """The storage node of an unreplicated partition (its ledger's one replica), and
        a client of it; Unavailable naming the node while it is not registered."""
        nodes = self._registered()
        current = ledgers.current
        if current is not None:
            node = current.ensemble[0]
            if node not in nodes:
                raise Unavailable(
                    f"partition {stream}/{partition} is stored on storage node {node}, "
                    "which is not registered (down?); it is served again when that node is back"
                )
            return node, self.client_at(nodes[node], node)
        if not nodes:
            raise Unavailable("no storage node is registered")
        (node,) = ring_successors(nodes, partition_key(stream, partition), 1)
        return node, self.client_at(nodes[node], node)

    def clients(self) -> dict[str, StorageClient]:
        """The registered storage nodes and a client of each."""
        return {node: self.client_at(address, node) for node, address in self._registered().items()}

    def client_at(self, address: str, node: str = "") -> StorageClient:
        """The client of the storage node at `address` (instance id `node`): in-process
        when it is one of this process's (`local`)."""
        channel = self._channels.get(address)
        client = self._clients.get(address)
        if client is None or client.channel is not channel:
            api = self._local.get(node)
            client = self._clients[address] = StorageClient(channel, cache=self._cache, api=api)
        return client

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()


class RouterShare:
    """Which partitions are this router's by placement, and giving the others back."""

    def __init__(
        self,
        directory: MemberDirectory,
        placement: PlacementView,
        member_id: str,
        gone_targets: GoneTargets,
    ) -> None:
        self._directory = directory
        self._placement = placement
        self._me = member_id
        self._gone_targets = gone_targets

    def _routers(self) -> set[str] | None:
        """The registered routers, or None while this one's own registration is not seen
        (no view yet)."""
        routers = {m.instance_id for m in self._directory.members("router")}
        return routers if self._me in routers else None

    def owner(self, stream: str, partition: int) -> str | None:
        """The router the partition is placed on, or None with no view yet."""
        routers = self._routers()
        return (
            None if routers is None else self._placement.current.owner(routers, stream, partition)
        )

    def placed_on(self, stream: str, partition: int) -> str | None:
        """The other live router the partition is placed on, or None (this one's, or no
        view yet)."""
        owner = self.owner(stream, partition)
        return None if owner == self._me else owner

    def eligible_routers(self) -> list[str]:
        """The registered routers that may own partitions (not drained)."""
        routers = (m.instance_id for m in self._directory.members("router"))
        return list(self._placement.current.eligible(routers))

    def owns(self, stream: str, partition: int) -> bool:
        """Whether this router owns the partition by placement (False with no view)."""
        return self.owner(stream, partition) == self._me

    async def hand_back_loop(
        self,
        claimed: Callable[[], Iterable[tuple[str, int]]],
        hand_back: Callable[[str, int], Awaitable[None]],
    ) -> None:
        """Forever: after a membership or placement change, and every few seconds, hand
        back each claimed partition another live router owns by placement."""
        while True:
            await self._next_change()
            routers = self._routers()
            if routers is None:
                continue
            decided = self._placement.current
            with contextlib.suppress(Exception):  # etcd hiccup: next pass
                await self._gone_targets.check(decided, routers)
            ring = HashRing(decided.eligible(routers))
            for stream, partition in list(claimed()):
                if decided.owner(routers, stream, partition, ring) == self._me:
                    continue
                try:
                    await hand_back(stream, partition)
                except Exception as exc:
                    log.warning("hand back failed", stream=stream, error=str(exc))

    async def _next_change(self) -> None:
        """Until the members or the placement change, or `HAND_BACK_CHECK_S` passes."""
        await next_change((self._directory, self._placement), HAND_BACK_CHECK_S)
