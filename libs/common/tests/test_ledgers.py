"""`tamto_common.ledgers` against a real etcd: the ledger list, its transactions and refusals.

Each change compares the key's mod_revision, so a change based on a list that
someone else changed meanwhile is refused (`LedgerConflict`), and a closed
ledger's range can never be reopened or moved (docs/cluster.md section 1).
"""

from __future__ import annotations

import asyncio
import json
import secrets

import aetcd
import pytest

from tamto_common.errors import NotFound
from tamto_common.ledgers import (
    Ledger,
    LedgerConflict,
    LedgerList,
    close_ledger,
    ledgers_key,
    list_ledgers,
    open_ledger,
    read_ledgers,
    replace_in_ledgers,
    replace_replica,
)


@pytest.fixture
def etcd(etcd_client: aetcd.Client) -> aetcd.Client:
    return etcd_client


@pytest.fixture
def stream() -> str:
    return f"ledgers-{secrets.token_hex(4)}"


async def test_a_partition_never_opened_has_an_empty_list(etcd: aetcd.Client, stream: str) -> None:
    ledgers = await read_ledgers(etcd, stream, 0)
    assert ledgers == LedgerList(stream, 0, (), 0)
    assert ledgers.current is None
    assert ledgers.holding(0) is None


async def test_the_record_is_the_documented_json(etcd: aetcd.Client, stream: str) -> None:
    await open_ledger(etcd, stream, 2, 3, ("storage-a",), 1, 0)
    await open_ledger(etcd, stream, 2, 5, ("storage-b",), 1, 1042, previous_last_offset=1041)
    kv = await etcd.get(ledgers_key(stream, 2))
    assert kv is not None
    assert kv.key == f"/tamto/ledgers/{stream}/2".encode()
    assert json.loads(kv.value) == {
        "ledgers": [
            {
                "epoch": 3,
                "ensemble": ["storage-a"],
                "ack_quorum": 1,
                "first_offset": 0,
                "last_offset": 1041,
                "state": "closed",
            },
            {
                "epoch": 5,
                "ensemble": ["storage-b"],
                "ack_quorum": 1,
                "first_offset": 1042,
                "last_offset": None,
                "state": "open",
            },
        ]
    }


async def test_open_close_open_and_where_each_offset_is(etcd: aetcd.Client, stream: str) -> None:
    opened = await open_ledger(etcd, stream, 0, 1, ("s1", "s2"), 2, 0)
    assert opened.revision > 0
    assert opened == await read_ledgers(etcd, stream, 0)
    closed = await close_ledger(etcd, stream, 0, 1, 99)
    assert closed.current == Ledger(1, ("s1", "s2"), 2, 0, 99, "closed")
    assert closed.next_offset == 100
    again = await open_ledger(etcd, stream, 0, 4, ("s2", "s3"), 1, 100)
    assert again == await read_ledgers(etcd, stream, 0)
    assert again.holding(0) == again.ledgers[0]
    assert again.holding(99) == again.ledgers[0]
    assert again.holding(100) == again.ledgers[1]
    assert again.holding(10**9) == again.ledgers[1]  # the open ledger has no end yet


async def test_opening_over_an_open_ledger_needs_its_closing_offset(
    etcd: aetcd.Client, stream: str
) -> None:
    await open_ledger(etcd, stream, 0, 1, ("s1",), 1, 0)
    with pytest.raises(LedgerConflict, match="epoch 1 is still open"):
        await open_ledger(etcd, stream, 0, 2, ("s1",), 1, 10)
    with pytest.raises(LedgerConflict, match="does not follow epoch 1's, which ends at 8"):
        await open_ledger(etcd, stream, 0, 2, ("s1",), 1, 10, previous_last_offset=8)
    written = await open_ledger(etcd, stream, 0, 2, ("s1",), 1, 10, previous_last_offset=9)
    assert [(x.epoch, x.first_offset, x.last_offset, x.state) for x in written.ledgers] == [
        (1, 0, 9, "closed"),
        (2, 10, None, "open"),
    ]


async def test_an_empty_ledger_closes_one_below_its_start(etcd: aetcd.Client, stream: str) -> None:
    await open_ledger(etcd, stream, 0, 1, ("s1",), 1, 5)
    with pytest.raises(LedgerConflict, match="closing offset 3 is below the start 5"):
        await close_ledger(etcd, stream, 0, 1, 3)
    closed = await close_ledger(etcd, stream, 0, 1, 4)
    assert closed.next_offset == 5
    assert closed.holding(5) is None


async def test_a_stale_epoch_is_refused(etcd: aetcd.Client, stream: str) -> None:
    await open_ledger(etcd, stream, 0, 5, ("s1",), 1, 0)
    with pytest.raises(LedgerConflict, match="epoch 4 is not newer than its last ledger's epoch 5"):
        await open_ledger(etcd, stream, 0, 4, ("s1",), 1, 0, previous_last_offset=-1)
    with pytest.raises(LedgerConflict, match="not of epoch 4"):
        await close_ledger(etcd, stream, 0, 4, 10)


async def test_repeating_a_change_changes_nothing(etcd: aetcd.Client, stream: str) -> None:
    first = await open_ledger(etcd, stream, 0, 1, ("s1",), 1, 0)
    assert await open_ledger(etcd, stream, 0, 1, ("s1",), 1, 0) == first
    with pytest.raises(LedgerConflict, match="epoch 1 already has an open ledger"):
        await open_ledger(etcd, stream, 0, 1, ("s2",), 1, 0)
    closed = await close_ledger(etcd, stream, 0, 1, 7)
    assert await close_ledger(etcd, stream, 0, 1, 7) == closed
    with pytest.raises(LedgerConflict, match="already closed at 7"):
        await close_ledger(etcd, stream, 0, 1, 8)


async def test_a_change_based_on_an_old_read_is_refused(etcd: aetcd.Client, stream: str) -> None:
    """Two routers read the same list; only the first one's change goes in."""
    read = await open_ledger(etcd, stream, 0, 1, ("s1",), 1, 0)
    await close_ledger(etcd, stream, 0, 1, 9, based_on=read)
    with pytest.raises(LedgerConflict, match="changed meanwhile") as refused:
        await open_ledger(etcd, stream, 0, 2, ("s1",), 1, 0, previous_last_offset=-1, based_on=read)
    assert f"read at revision {read.revision}, now " in str(refused.value)
    assert (await read_ledgers(etcd, stream, 0)).current == Ledger(1, ("s1",), 1, 0, 9, "closed")


async def test_racing_opens_leave_exactly_one(etcd: aetcd.Client, stream: str) -> None:
    await open_ledger(etcd, stream, 0, 1, ("s1",), 1, 0)
    base = await read_ledgers(etcd, stream, 0)
    results = await asyncio.gather(
        *(
            open_ledger(
                etcd, stream, 0, epoch, ("s1",), 1, 50, previous_last_offset=49, based_on=base
            )
            for epoch in (2, 3, 4)
        ),
        return_exceptions=True,
    )
    won = [r for r in results if isinstance(r, LedgerList)]
    assert len(won) == 1
    assert all(isinstance(r, LedgerConflict) for r in results if r not in won)
    assert await read_ledgers(etcd, stream, 0) == won[0]


async def test_replace_replica(etcd: aetcd.Client, stream: str) -> None:
    await open_ledger(etcd, stream, 0, 1, ("a", "b", "c"), 2, 0)
    await open_ledger(etcd, stream, 0, 2, ("b", "c", "d"), 2, 10, previous_last_offset=9)
    replaced = await replace_replica(etcd, stream, 0, 1, "a", "e")
    assert replaced.ledgers[0].ensemble == ("e", "b", "c")
    assert replaced.ledgers[1].ensemble == ("b", "c", "d")
    assert await read_ledgers(etcd, stream, 0) == replaced
    with pytest.raises(LedgerConflict, match="a is not in epoch 1's ensemble"):
        await replace_replica(etcd, stream, 0, 1, "a", "f")
    with pytest.raises(LedgerConflict, match="d is already in epoch 2's ensemble"):
        await replace_replica(etcd, stream, 0, 2, "b", "d")
    with pytest.raises(NotFound, match="no ledger of epoch 7"):
        await replace_replica(etcd, stream, 0, 7, "b", "x")


async def test_bad_ensembles_are_refused(etcd: aetcd.Client, stream: str) -> None:
    with pytest.raises(ValueError, match="ack_quorum 3 must be between 1 and 2"):
        await open_ledger(etcd, stream, 0, 1, ("a", "b"), 3, 0)
    with pytest.raises(ValueError, match="names a node twice"):
        await open_ledger(etcd, stream, 0, 1, ("a", "a"), 1, 0)
    assert (await read_ledgers(etcd, stream, 0)).current is None


async def test_list_ledgers_names_every_partition_of_every_stream(
    etcd: aetcd.Client, stream: str
) -> None:
    for partition in (1, 0):
        await open_ledger(etcd, stream, partition, 1, ("storage-a", "storage-b"), 2, 0)
    await open_ledger(etcd, f"{stream}/x", 0, 1, ("storage-c",), 1, 0)  # "/" in a name
    mine = [(x.stream, x.partition, x.current) for x in await list_ledgers(etcd)]
    assert [m for m in mine if m[0].startswith(stream)] == [
        (stream, 0, Ledger(1, ("storage-a", "storage-b"), 2, 0)),
        (stream, 1, Ledger(1, ("storage-a", "storage-b"), 2, 0)),
        (f"{stream}/x", 0, Ledger(1, ("storage-c",), 1, 0)),
    ]


async def test_replace_in_ledgers_puts_the_spare_in_every_ledger_naming_the_lost_node(
    etcd: aetcd.Client, stream: str
) -> None:
    ensemble = ("storage-a", "storage-b", "storage-c")
    await open_ledger(etcd, stream, 0, 1, ensemble, 2, 0)
    await open_ledger(etcd, stream, 0, 2, ensemble, 2, 10, previous_last_offset=9)
    replaced = await replace_in_ledgers(etcd, stream, 0, "storage-b", "storage-d")
    assert [x.ensemble for x in replaced.ledgers] == [("storage-a", "storage-d", "storage-c")] * 2
    assert await read_ledgers(etcd, stream, 0) == replaced
    # Again: nothing names storage-b any more, nothing changes.
    assert await replace_in_ledgers(etcd, stream, 0, "storage-b", "storage-d") == replaced
