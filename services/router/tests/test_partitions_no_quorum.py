"""A replicated partition (R = 3, Q = 2) burns no epochs while it has no quorum.

Each request for a partition without an open log tries to open it; before, each try
claimed a new epoch (an etcd write, and on recovery one more ledger to fence and
close): hundreds in a 10 s outage. Now a try claims nothing while fewer than Q
replicas are registered, and takes up its own claim again while the registered ones
do not answer, so the whole outage costs one epoch at most.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

import aetcd
import pytest

from tamto_common.errors import Unavailable
from tamto_common.ledgers import LedgerList, read_ledgers
from tamto_common.streams import StreamDef
from tamto_router.model import Batch, LogBounds
from tamto_router.ownership import EPOCHS, OWNERS
from tamto_router.partitions import Partitions
from tamto_router.storage_client import StorageClient

NODES = ("storage-a", "storage-b", "storage-c")
#: Requests during each outage (a client retrying, a few seconds' worth).
TRIES = 30


class Replica:
    """One storage node's copy of the partition; `down` refuses every call."""

    def __init__(self) -> None:
        self.down = False
        self.registered = True

    def _check(self) -> None:
        if self.down:
            raise Unavailable("connection refused")

    async def open_partition(self, stream: str, partition: int, epoch: int) -> LogBounds:
        self._check()
        return LogBounds(0, 0)

    async def offset_for_time(self, stream: str, partition: int, time_us: int) -> int:
        self._check()
        return 0

    async def read(
        self, stream: str, partition: int, offset: int, limit: int
    ) -> tuple[list[Batch], int]:
        self._check()
        return [], 0


async def epoch_of(etcd: aetcd.Client, stream: str) -> int:
    kv = await etcd.get(f"{EPOCHS}{stream}/0".encode())
    return int(kv.value) if kv is not None else 0


@contextlib.asynccontextmanager
async def replicated_partitions(
    etcd_client: aetcd.Client, replicas: dict[str, Replica]
) -> AsyncIterator[Partitions]:
    """router-1's partitions of R = 3, Q = 2 streams over `replicas` (the registered
    ones are its storage clients), on a lease of its own."""

    def replicas_for(
        s: str, p: int, ledgers: LedgerList, r: int
    ) -> tuple[tuple[str, ...], dict[str, StorageClient]]:
        clients = {n: rep for n, rep in replicas.items() if rep.registered}
        return NODES, clients  # type: ignore[return-value]

    async def stream_def(name: str) -> StreamDef:
        return StreamDef(name, 1, replication_factor=3, ack_quorum=2)

    def no_single_node(s: str, p: int, ledgers: LedgerList) -> tuple[str, StorageClient]:
        raise AssertionError("a replicated partition has no single storage node")

    lease = await etcd_client.lease(30)
    partitions = Partitions(
        etcd_client,
        lambda: lease,
        "router-1",
        no_single_node,
        claim_timeout_s=5.0,
        stream_def=stream_def,
        replicas_for=replicas_for,
    )
    try:
        yield partitions
    finally:
        await partitions.close()
        await lease.revoke()


async def tries(partitions: Partitions, stream: str) -> None:
    for _ in range(TRIES):
        with pytest.raises(Unavailable, match="no quorum: 1 of 3 replicas reachable, 2 needed"):
            await partitions.get(stream, 0)


async def test_an_outage_of_two_replicas_uses_one_epoch_at_most(
    etcd_client: aetcd.Client,
) -> None:
    stream = f"noquorum-{uuid.uuid4().hex[:8]}"
    replicas = {node: Replica() for node in NODES}
    async with replicated_partitions(etcd_client, replicas) as partitions:
        # Two nodes unregistered (down for longer than their lease): nothing is claimed.
        replicas["storage-b"].registered = replicas["storage-c"].registered = False
        await tries(partitions, stream)
        assert await epoch_of(etcd_client, stream) == 0

        # Registered but not answering (killed or hung within their lease TTL): the
        # first try claims an epoch, the others take that claim up again.
        replicas["storage-b"].registered = replicas["storage-c"].registered = True
        replicas["storage-b"].down = replicas["storage-c"].down = True
        await tries(partitions, stream)
        assert await epoch_of(etcd_client, stream) == 1

        # Back: the partition opens on that same epoch and records its ledger.
        replicas["storage-b"].down = replicas["storage-c"].down = False
        opened = await partitions.get(stream, 0)
        assert opened.epoch == 1
        assert await epoch_of(etcd_client, stream) == 1
        ledgers = await read_ledgers(etcd_client, stream, 0)
        assert [ledger.epoch for ledger in ledgers.ledgers] == [1]


async def test_a_claim_whose_open_failed_is_handed_back(etcd_client: aetcd.Client) -> None:
    """The hand-back loop releases what `held` lists: a claim kept for the next
    open (its replicas did not answer) is listed too, so a partition the gateways
    route to another router is not held by this one for as long as its lease lives."""
    stream = f"unopened-{uuid.uuid4().hex[:8]}"
    replicas = {node: Replica() for node in NODES}
    for node in ("storage-b", "storage-c"):
        replicas[node].down = True

    owner_key = f"{OWNERS}{stream}/0".encode()
    async with replicated_partitions(etcd_client, replicas) as partitions:
        with pytest.raises(Unavailable, match="no quorum"):
            await partitions.get(stream, 0)
        assert await etcd_client.get(owner_key) is not None  # claimed, not opened
        assert partitions.held() == [(stream, 0)]
        await partitions.hand_back(stream, 0)
        assert partitions.held() == []
        assert await etcd_client.get(owner_key) is None
