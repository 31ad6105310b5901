"""`tamto_common.placement`: moves and drains against a real etcd, and the owner rule.

A move puts a partition on a live router instead of the ring's choice; a drained
router gets no partitions from the ring; bad requests are refused precisely
(docs/cluster.md section 4).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import aetcd
import pytest

from tamto_common.errors import FailedPrecondition, InvalidArgument, NotFound
from tamto_common.membership import Member
from tamto_common.placement import (
    GoneTargets,
    Placement,
    drained_key,
    move_key,
    move_partition,
    read_placement,
    set_drained,
)
from tamto_common.ring import HashRing, partition_key
from tamto_common.streams import StreamDef, stream_key


def test_a_move_wins_while_its_router_is_live_and_not_drained() -> None:
    routers = {"r1", "r2", "r3"}
    ring_choice = HashRing(routers).owner(partition_key("s", 0))
    other = sorted(routers - {ring_choice})[0]
    moved = Placement({("s", 0): other})
    assert moved.owner(routers, "s", 0) == other
    assert moved.owner(routers - {other}, "s", 0) != other, "a gone router is ignored"
    drained = Placement({("s", 0): other}, frozenset({other}))
    assert drained.owner(routers, "s", 0) != other, "a drained router gets nothing"


def test_a_drained_router_owns_no_partition_unless_every_router_is_drained() -> None:
    routers = {"r1", "r2", "r3"}
    placement = Placement(drained=frozenset({"r2"}))
    owners = {placement.owner(routers, "s", p) for p in range(64)}
    assert owners == {"r1", "r3"}
    assert Placement(drained=frozenset(routers)).eligible(routers) == routers


@pytest.fixture
async def cluster(etcd_client: aetcd.Client) -> AsyncIterator[tuple[aetcd.Client, str, list[str]]]:
    """Two registered routers and a stream of 4 partitions (removed after)."""
    suffix = secrets.token_hex(3)
    stream, routers = f"placed-{suffix}", [f"r1-{suffix}", f"r2-{suffix}"]
    members = [Member("router", r, "127.0.0.1:1", "", "test", 1, 0.0) for r in routers]
    for member in members:
        await etcd_client.put(member.key.encode(), member.to_json())
    await etcd_client.put(stream_key(stream), StreamDef(stream, 4).to_json())
    yield etcd_client, stream, routers
    for member in members:
        await etcd_client.delete(member.key.encode())
    await etcd_client.delete(stream_key(stream))
    for partition in range(4):
        await etcd_client.delete(move_key(stream, partition))
    for router in routers:
        await etcd_client.delete(drained_key(router))


async def test_move_records_the_router_and_ring_removes_it(
    cluster: tuple[aetcd.Client, str, list[str]],
) -> None:
    etcd, stream, (r1, r2) = cluster
    assert await move_partition(etcd, stream, 3, r2) == r2
    assert (await read_placement(etcd)).moves[(stream, 3)] == r2
    back = await move_partition(etcd, stream, 3, None)
    assert (stream, 3) not in (await read_placement(etcd)).moves
    assert back in {r1, r2}


async def test_move_refuses_unknown_streams_partitions_and_routers_precisely(
    cluster: tuple[aetcd.Client, str, list[str]],
) -> None:
    etcd, stream, (r1, _) = cluster
    with pytest.raises(NotFound, match="stream 'nope-x' does not exist"):
        await move_partition(etcd, "nope-x", 0, r1)
    with pytest.raises(NotFound, match=rf"stream '{stream}' has no partition 4 \(it has 4: 0-3\)"):
        await move_partition(etcd, stream, 4, r1)
    with pytest.raises(FailedPrecondition, match="router 'gone-1' is not live"):
        await move_partition(etcd, stream, 0, "gone-1")
    with pytest.raises(InvalidArgument):
        await move_partition(etcd, stream, 0, "bad/router")


async def test_drain_and_undrain(cluster: tuple[aetcd.Client, str, list[str]]) -> None:
    etcd, stream, (r1, _) = cluster
    await move_partition(etcd, stream, 1, r1)
    assert r1 in await set_drained(etcd, r1, True)
    placement = await read_placement(etcd)
    assert r1 in placement.drained
    assert (stream, 1) not in placement.moves, "a move to a drained router is removed"
    with pytest.raises(FailedPrecondition, match=f"router '{r1}' is drained"):
        await move_partition(etcd, stream, 1, r1)
    assert r1 not in await set_drained(etcd, r1, False)
    with pytest.raises(NotFound, match="router 'gone-1' is not registered"):
        await set_drained(etcd, "gone-1", True)


async def test_the_last_router_not_drained_cannot_be_drained(
    cluster: tuple[aetcd.Client, str, list[str]],
) -> None:
    etcd, _, (r1, r2) = cluster
    await set_drained(etcd, r1, True)
    with pytest.raises(FailedPrecondition, match="would leave no live router"):
        await set_drained(etcd, r2, True)


async def test_a_move_to_a_router_that_left_is_removed(
    cluster: tuple[aetcd.Client, str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    etcd, stream, (r1, r2) = cluster
    await move_partition(etcd, stream, 2, r2)
    monkeypatch.setattr("tamto_common.placement.MOVE_TARGET_GONE_S", 0.0)
    gone = GoneTargets(etcd)
    await gone.check(await read_placement(etcd), [r1, r2])
    assert (stream, 2) in (await read_placement(etcd)).moves, "its router is live"
    await gone.check(await read_placement(etcd), [r1])
    assert (stream, 2) not in (await read_placement(etcd)).moves
