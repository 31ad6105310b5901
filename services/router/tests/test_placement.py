"""Where a partition's data lives and which router should own it (`tamto_router.placement`)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from tamto_common.channels import ChannelPool
from tamto_common.errors import Unavailable
from tamto_common.ledgers import Ledger, LedgerList
from tamto_common.membership import Member, MemberDirectory
from tamto_common.placement import GoneTargets, Placement, PlacementView
from tamto_router.batch_cache import BatchCache
from tamto_router.placement import RouterShare, StorageNodes, ring_successors


class Directory:
    """The members a `MemberDirectory` would list (this module's only view of it)."""

    def __init__(self, **services: list[str]) -> None:
        self.services = services
        self.changed = asyncio.Event()

    def members(self, service: str) -> list[Member]:
        return [
            Member(service, name, f"127.0.0.1:{9000 + i}", "", "0", 0, 0.0)
            for i, name in enumerate(self.services.get(service, []))
        ]


def storage(*nodes: str) -> StorageNodes:
    directory = cast(MemberDirectory, Directory(storage=list(nodes)))
    return StorageNodes(directory, ChannelPool(), BatchCache(1 << 20))


def recorded(*ensemble: str) -> LedgerList:
    return LedgerList("orders", 0, (Ledger(1, ensemble, 1, 0),), 1)


NEW = LedgerList("orders", 0)


async def test_a_recorded_ledger_decides_the_node_never_the_ring() -> None:
    nodes = storage("storage-1", "storage-2", "storage-3")
    node, client = nodes.storage_for("orders", 0, recorded("storage-2"))
    assert node == "storage-2"
    assert client is nodes.client_at("127.0.0.1:9001")  # one client per address
    with pytest.raises(Unavailable, match="stored on storage node storage-9, which is not"):
        nodes.storage_for("orders", 0, recorded("storage-9"))
    await nodes.close()


async def test_a_new_partition_goes_where_the_ring_says() -> None:
    nodes = storage("storage-1", "storage-2", "storage-3")
    node, _ = nodes.storage_for("orders", 0, NEW)
    assert (node,) == ring_successors(["storage-1", "storage-2", "storage-3"], "orders/0", 1)
    with pytest.raises(Unavailable, match="no storage node is registered"):
        storage().storage_for("orders", 0, NEW)
    await nodes.close()


async def test_replicas_are_distinct_ring_successors_or_the_recorded_ensemble() -> None:
    nodes = storage("s1", "s2", "s3", "s4")
    ensemble, clients = nodes.replicas_for("orders", 3, NEW, 3)
    assert len(set(ensemble)) == 3
    assert set(clients) == set(ensemble)
    assert ensemble == ring_successors(["s4", "s3", "s2", "s1"], "orders/3", 3)
    recorded_ensemble, clients = nodes.replicas_for("orders", 3, recorded("s1", "s9", "s2"), 3)
    assert recorded_ensemble == ("s1", "s9", "s2")  # never recomputed
    assert set(clients) == {"s1", "s2"}  # only the registered get a client
    with pytest.raises(Unavailable, match="needs 3 storage nodes, 2 are registered"):
        storage("s1", "s2").replicas_for("orders", 3, NEW, 3)
    await nodes.close()


class View:
    def __init__(self, current: Placement) -> None:
        self.current = current
        self.changed = asyncio.Event()


def share(me: str, routers: list[str], current: Placement) -> RouterShare:
    directory = cast(MemberDirectory, Directory(router=routers))
    view = cast(PlacementView, View(current))
    return RouterShare(directory, view, me, cast(GoneTargets, None))


def test_the_share_follows_moves_and_drains_and_has_no_view_before_registering() -> None:
    routers = ["router-1", "router-2"]
    moved = Placement(moves={("orders", 0): "router-2"})
    mine = share("router-1", routers, moved)
    assert mine.placed_on("orders", 0) == "router-2"
    assert not mine.owns("orders", 0)
    assert share("router-2", routers, moved).owns("orders", 0)
    drained = share("router-1", routers, Placement(drained=frozenset({"router-1"})))
    assert drained.eligible_routers() == ["router-2"]
    assert not any(drained.owns("orders", p) for p in range(20))
    unseen = share("router-3", routers, Placement())
    assert unseen.placed_on("orders", 0) is None
    assert not unseen.owns("orders", 0)


async def test_hand_back_gives_up_exactly_the_partitions_placed_elsewhere() -> None:
    routers = ["router-1", "router-2"]
    moved = Placement(moves={("orders", 1): "router-2"})
    mine = share("router-1", routers, moved)
    given: list[tuple[str, int]] = []
    claimed = [("orders", 0), ("orders", 1)]
    owned_here = [p for p in claimed if p != ("orders", 1) and mine.owns(*p)]

    class NoGone:
        async def check(self, *_: Any) -> None:
            return None

    mine._gone_targets = cast(GoneTargets, NoGone())

    moved_given = asyncio.Event()

    async def hand_back(stream: str, partition: int) -> None:
        given.append((stream, partition))
        if (stream, partition) == ("orders", 1):
            moved_given.set()

    loop = asyncio.create_task(mine.hand_back_loop(lambda: claimed, hand_back))
    try:
        await asyncio.wait_for(moved_given.wait(), 10)
    finally:
        loop.cancel()
    assert ("orders", 1) in given
    assert not set(owned_here) & set(given)
