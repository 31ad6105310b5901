"""A replica that was out of a replicated log's appends comes back whole: the entries it
missed and the cursors the others hold (over three real storage servers).

Before, a rejoining replica got the entries only: a spare had no cursor, and a replica
that missed a seek back kept the older, more advanced cursor (which the next owner's
load, taking the most advanced, would have brought back) and a deleted one.
"""

from __future__ import annotations

from test_quorum import (
    PARTITION,
    STREAM,
    Node,
    append,
    clients,
    nodes,  # noqa: F401 (the fixture)
    open_all,
    reaches,
    read_all,
    replicated_log,
)

from tamto_router.acks import AckSet
from tamto_router.cursors import commit_cursor, delete_cursor
from tamto_router.storage_client import StorageClient
from tamto_testing.waiting import eventually

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
