"""A replica that was out of a replicated log's appends comes back whole: the entries it
missed and the cursors the others hold (over three real storage servers); one whose copy
diverged in data its node sealed is cut in place and rejoins (no spare needed), and one
whose divergence the segment store already committed is replaced by a spare that is whole.

Before, a rejoining replica got the entries only: a spare had no cursor, and a replica
that missed a seek back kept the older, more advanced cursor (which the next owner's
load, taking the most advanced, would have brought back) and a deleted one. A
registered replica with a sealed stale tail stayed out for good: the ledger kept R - 1
copies, and only unregistered members were replaced.
"""

from __future__ import annotations

from pathlib import Path

from tamto_router.acks import AckSet
from tamto_router.cursors import commit_cursor, delete_cursor
from tamto_router.model import LogBounds
from tamto_router.storage_client import StorageClient
from tamto_testing.waiting import eventually
from tests.e2e.test_quorum import (
    PARTITION,
    STREAM,
    Node,
    append,
    clients,
    committed_to_a_segment_store,
    keep_a_tail_past_the_recovered_end,
    nodes,  # noqa: F401 (the fixture)
    open_all,
    reaches,
    read_all,
    replaced_by_spare,
    replicated_log,
    stored,
)

CURSORS = ("audit", "billing", "old")


async def cursors_on(client: StorageClient) -> dict[str, AckSet | None]:
    names = await client.list_cursors(STREAM, PARTITION)
    return {n: await client.get_cursor(STREAM, PARTITION, n) for n in names}


async def test_a_replica_back_from_an_outage_has_every_entry_and_cursor_of_the_others(
    nodes: dict[str, Node],  # noqa: F811
) -> None:
    await open_all(nodes, 1)
    reachable = clients(nodes)
    log = replicated_log(nodes, tuple(nodes), reachable)
    restarted = Node(nodes["storage-c"].data_dir)  # started once the first one is stopped
    try:
        await append(log, 0, 10)
        for name in CURSORS:
            await commit_cursor(log, name, AckSet(8))
        await nodes["storage-c"].stop()
        del reachable["storage-c"]
        await append(log, 10, 5)  # acked by a and b; c failed it and is out
        assert log.lagging() == ["storage-c"]
        # Meanwhile: a seek back, a delete, a new subscription, a commit.
        await commit_cursor(log, "billing", AckSet(2), replace=True)
        assert await delete_cursor(log, "old")
        await commit_cursor(log, "new", AckSet(5, [(7, 9)]))
        await commit_cursor(log, "audit", AckSet(12))

        await restarted.server.start()  # storage-c comes back on its directory
        reachable["storage-c"] = restarted.client
        await append(log, 15, 2)
        await eventually(lambda: not log.lagging(), 30.0, "storage-c takes appends again")
        await append(log, 17, 1)
        replicas = {"storage-a": nodes["storage-a"].client, "storage-b": nodes["storage-b"].client}
        replicas["storage-c"] = restarted.client
        for client in replicas.values():
            await reaches(client, 18)
        # Every replica holds the same bytes, and the same cursors.
        stored = {name: await read_all(client) for name, client in replicas.items()}
        as_bytes = {
            name: [(b.base_offset, b.count, b.arrow_ipc) for b in batches]
            for name, (batches, _) in stored.items()
        }
        assert as_bytes["storage-c"] == as_bytes["storage-a"] == as_bytes["storage-b"]
        assert sum(count for _, count, _ in as_bytes["storage-a"]) == 18
        expected = {"audit": AckSet(12), "billing": AckSet(2), "new": AckSet(5, [(7, 9)])}
        for client in replicas.values():
            assert await cursors_on(client) == expected
    finally:
        await log.close()
        await restarted.stop()
        await restarted.client.close()
        await restarted.channel.close()


async def same_bytes(replicas: dict[str, StorageClient]) -> list[tuple[int, int, bytes]]:
    """The batches every replica stores, asserting they are the same bytes on each."""
    found = {
        name: [(b.base_offset, b.count, b.arrow_ipc) for b in (await read_all(client))[0]]
        for name, client in replicas.items()
    }
    first, *others = found.values()
    assert all(other == first for other in others), {n: len(b) for n, b in found.items()}
    return first


async def test_a_replica_diverged_in_sealed_data_is_cut_in_place_and_rejoins(
    nodes: dict[str, Node],  # noqa: F811
) -> None:
    await keep_a_tail_past_the_recovered_end(nodes)  # c holds m40-m42 at offsets 2-4
    sealed = await nodes["storage-c"].store.get(STREAM, PARTITION)
    assert [s.entry.last_offset for s in await sealed.seal(1 << 20)] == [4]  # one segment
    # No spare: three nodes for three replicas.
    log = replicated_log(nodes, ("storage-a", "storage-b"), clients(nodes), 2, 2)
    replicas = clients(nodes)
    try:
        for first in range(2, 8, 2):
            await append(log, first, 2)
        await eventually(lambda: not log.lagging(), 30.0, "storage-c takes appends again")
        assert log.ensemble == ("storage-a", "storage-b", "storage-c")
        await append(log, 8, 2)
        for client in replicas.values():
            await reaches(client, 10)
        every = await same_bytes(replicas)  # a, b and c
        assert sum(count for _, count, _ in every) == 10
        assert await stored(nodes["storage-c"]) == [f"m{o}".encode() for o in range(10)]
    finally:
        await log.close()
    # Its segment was cut to offsets 0-1 (m40-m42 gone), and the rest sealed anew.
    assert sealed.segment_log.segments[0].entry.last_offset == 1


async def test_a_replica_diverged_in_data_the_segment_store_has_is_replaced_by_a_spare(
    nodes: dict[str, Node],  # noqa: F811
    tmp_path: Path,
) -> None:
    await keep_a_tail_past_the_recovered_end(nodes)  # c holds m40-m42 at offsets 2-4
    spare = Node(tmp_path / "storage-d")
    await spare.server.start()
    async with committed_to_a_segment_store(nodes, tmp_path / "store") as storage_c:
        reachable = {**clients(nodes), "storage-d": spare.client}  # c is registered
        log, recorded = replaced_by_spare(nodes, reachable, 2, LogBounds(0, 2))
        replicas = {n: nodes[n].client for n in ("storage-a", "storage-b")}
        try:
            for first in range(2, 8, 2):
                await append(log, first, 2)
            await eventually(
                lambda: recorded == [("storage-c", "storage-d")],
                30.0,
                "storage-d replaced storage-c",
            )
            assert log.ensemble == ("storage-a", "storage-b", "storage-d")
            await eventually(lambda: not log.lagging(), 30.0, "storage-d takes appends")
            await append(log, 8, 2)
            for client in (*replicas.values(), spare.client):
                await reaches(client, 10)
            every = await same_bytes({**replicas, "storage-d": spare.client})
            assert sum(count for _, count, _ in every) == 10
            assert await stored(nodes["storage-a"]) == [f"m{o}".encode() for o in range(10)]
        finally:
            await log.close()
            await spare.stop()
            await spare.client.close()
            await spare.channel.close()
        # storage-c is out of the ledger, left as it was (never read).
        assert await stored(storage_c) == [b"m0", b"m1", b"m40", b"m41", b"m42"]
