"""Deletion records against a real etcd: who may hold a copy, changes by compare-and-swap,
and the record's end once every node and the shared remains are done."""

from __future__ import annotations

import asyncio
import json
import uuid

import aetcd

from tamto_common.deletions import (
    StreamDeletion,
    deletion_key,
    holders,
    read_deletions,
    shared_removed,
    stream_prefixes,
    update_deletion,
    without_node,
)
from tamto_common.ledgers import ledgers_key


def unique() -> str:
    return f"del{uuid.uuid4().hex[:8]}"


def test_a_streams_prefixes_do_not_take_in_another_whose_name_it_starts() -> None:
    assert all(p.endswith(b"/orders/") for p in stream_prefixes("orders"))
    assert not any(b"/orders-2/".startswith(p) for p in stream_prefixes("orders"))


async def test_holders_are_the_ledger_ensembles_and_the_registered_nodes(
    etcd_client: aetcd.Client,
) -> None:
    stream = unique()
    for partition, ensemble in ((0, ["a", "b"]), (1, ["c"])):
        ledgers = {"ledgers": [{"epoch": 1, "ensemble": ensemble}]}
        await etcd_client.put(ledgers_key(stream, partition), json.dumps(ledgers).encode())
    try:
        assert await holders(etcd_client, stream, ["b", "d"]) == ("a", "b", "c", "d")
    finally:
        for partition in (0, 1):
            await etcd_client.delete(ledgers_key(stream, partition))


async def test_the_record_goes_when_every_node_and_the_shared_part_are_done(
    etcd_client: aetcd.Client,
) -> None:
    stream = unique()
    record = StreamDeletion(stream, 2, 1_000, ("a", "b"))
    await etcd_client.put(deletion_key(stream), record.to_json())
    assert record in await read_deletions(etcd_client)
    assert record.due(1_000 + 5, 5)
    assert not record.due(1_000 + 4, 5)

    # Two nodes at once: compare-and-swap keeps both changes.
    await asyncio.gather(*(update_deletion(etcd_client, stream, without_node(n)) for n in "ab"))
    kv = await etcd_client.get(deletion_key(stream))
    assert kv is not None
    assert StreamDeletion.from_json(kv.value).pending == ()
    assert await update_deletion(etcd_client, stream, shared_removed) is None
    assert await etcd_client.get(deletion_key(stream)) is None
    assert await update_deletion(etcd_client, stream, shared_removed) is None  # gone: no-op
