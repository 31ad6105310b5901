"""Cursors of a replicated partition on every replica (three real storage servers).

A cursor committed with R = 3, Q = 2 must survive the loss of the node the router
reads from: a new owner finds it on the others.
"""

from __future__ import annotations

import pytest

from tamto_common.errors import Unavailable
from tamto_router.acks import AckSet, most_advanced
from tamto_router.cursors import (
    commit_cursor,
    delete_cursor,
    get_cursor,
    list_cursors,
)
from tests.e2e.test_quorum import (
    Node,
    append,
    nodes,  # noqa: F401 (the fixture)
    open_all,
    replicated_log,
)


async def test_a_cursor_survives_the_loss_of_the_node_the_router_reads_from(
    nodes: dict[str, Node],  # noqa: F811
) -> None:
    await open_all(nodes, 1)
    owner = replicated_log(nodes, tuple(nodes), {})
    try:
        assert owner.storage is nodes["storage-a"].client  # the router reads from a
        await append(owner, 0, 10)
        await commit_cursor(owner, "billing", AckSet(4, [(6, 7)]))
    finally:
        await owner.close()
    await nodes["storage-a"].stop()
    # The next owner: its ledger's replicas that answered are b and c.
    await nodes["storage-b"].client.open_partition("orders", 0, 2)
    await nodes["storage-c"].client.open_partition("orders", 0, 2)
    successor = replicated_log(nodes, ("storage-b", "storage-c"), {}, epoch=2, next_offset=10)
    try:
        assert await get_cursor(successor, "billing") == AckSet(4, [(6, 7)])
        assert await list_cursors(successor) == ["billing"]
        # It moves on there, and a commit reaches both replicas (the quorum).
        await commit_cursor(successor, "billing", AckSet(9))
        for node in ("storage-b", "storage-c"):
            stored = await nodes[node].client.get_cursor("orders", 0, "billing")
            assert stored == AckSet(9)
    finally:
        await successor.close()


async def test_a_seek_back_replaces_the_cursor_on_every_replica_and_needs_them_all(
    nodes: dict[str, Node],  # noqa: F811
) -> None:
    await open_all(nodes, 1)
    owner = replicated_log(nodes, tuple(nodes), {})
    try:
        await append(owner, 0, 10)
        await commit_cursor(owner, "billing", AckSet(8))
        await commit_cursor(owner, "billing", AckSet(2), replace=True)  # a seek back
        assert await get_cursor(owner, "billing") == AckSet(2)
        for node in nodes.values():
            assert await node.client.get_cursor("orders", 0, "billing") == AckSet(2)
        await nodes["storage-c"].stop()
        # A replica that kept the old cursor would bring it back: refused, retried later.
        with pytest.raises(Unavailable, match="no quorum"):
            await commit_cursor(owner, "billing", AckSet(0), replace=True)
        with pytest.raises(Unavailable, match="no quorum"):
            await delete_cursor(owner, "billing")
        # An ordinary commit needs only the quorum.
        await commit_cursor(owner, "billing", AckSet(5))
    finally:
        await owner.close()


def test_the_most_advanced_cursor_has_the_highest_floor_then_the_most_acks() -> None:
    behind, ahead, further = AckSet(3, [(5, 9)]), AckSet(4), AckSet(4, [(6, 6)])
    assert most_advanced([behind, further, ahead]) == further
    assert most_advanced([behind, ahead]) == ahead
    assert most_advanced([]) is None
