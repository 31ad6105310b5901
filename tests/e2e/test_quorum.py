"""Quorum appends and fences: the router's quorum code over three real storage servers.

It needs two services (router and storage), so it lives with the end-to-end tests;
the storage servers run in this process, each over its own directory.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from tamto_common.errors import FailedPrecondition, Unavailable
from tamto_common.grpc_errors import TranslateErrorsInterceptor
from tamto_protocol.batch import decode_batch
from tamto_router.model import Batch, LogBounds
from tamto_router.partition_log import PartitionLog
from tamto_router.quorum import append_quorum, fence_quorum, recover_ledger_end
from tamto_router.replica_catch_up import Rereplicate
from tamto_router.storage_client import StorageClient
from tamto_storage.grpc_api import StorageServicer, serve
from tamto_storage.publisher import Publisher
from tamto_storage.segment_store import SegmentStore
from tamto_storage.store import PartitionStore
from tamto_storage.wal import WalOptions
from tamto_testing.grpc_servers import listen
from tamto_testing.waiting import eventually
from tests.stored_batches import offset_payloads

STREAM, PARTITION = "orders", 0


class Node:
    """One storage server over its own directory, and a client of it."""

    def __init__(self, data_dir: Path, publisher: Publisher | None = None) -> None:
        self.data_dir = data_dir
        self.store = PartitionStore(data_dir, WalOptions(), publisher=publisher)
        self.server = grpc.aio.server(interceptors=[TranslateErrorsInterceptor()])
        serve(StorageServicer(self.store, 1 << 20), self.server)
        self.port = listen(self.server)
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.port}")
        self.client = StorageClient(self.channel, timeout_s=5.0)
        self.stopped = False

    async def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            await self.server.stop(None)
            await self.store.close()


@pytest.fixture
async def nodes(tmp_path: Path) -> AsyncIterator[dict[str, Node]]:
    made = {name: Node(tmp_path / name) for name in ("storage-a", "storage-b", "storage-c")}
    async with contextlib.AsyncExitStack() as stack:
        for node in made.values():
            await node.server.start()
            stack.push_async_callback(node.stop)
            stack.push_async_callback(node.client.close)
            stack.push_async_callback(node.channel.close)
        yield made


def batch(base: int, count: int) -> Batch:
    return Batch(base, count, 1_700_000_000_000_000, offset_payloads(base, count, "test"))


def clients(nodes: dict[str, Node]) -> dict[str, StorageClient]:
    return {name: node.client for name, node in nodes.items()}


async def open_all(nodes: dict[str, Node], epoch: int) -> None:
    for node in nodes.values():
        await node.client.open_partition(STREAM, PARTITION, epoch)


async def test_an_append_is_acknowledged_with_one_replica_of_three_down(
    nodes: dict[str, Node],
) -> None:
    await open_all(nodes, 1)
    assert await append_quorum(clients(nodes), 2, STREAM, PARTITION, 1, [batch(0, 4)]) == 4
    await nodes["storage-c"].stop()
    assert await append_quorum(clients(nodes), 2, STREAM, PARTITION, 1, [batch(4, 2)]) == 6
    for name in ("storage-a", "storage-b"):
        batches, next_offset = await nodes[name].client.read(STREAM, PARTITION, 0, 100)
        assert next_offset == 6
        assert sum(b.count for b in batches) == 6


async def test_two_replicas_of_three_down_is_no_quorum_never_an_ack(
    nodes: dict[str, Node],
) -> None:
    await open_all(nodes, 1)
    await nodes["storage-b"].stop()
    await nodes["storage-c"].stop()
    with pytest.raises(Unavailable, match="no quorum: 1 of 3 replicas reachable, 2 needed"):
        await append_quorum(clients(nodes), 2, STREAM, PARTITION, 1, [batch(0, 3)])


async def test_a_fence_needs_r_minus_q_plus_one_and_stops_the_old_owner(
    nodes: dict[str, Node],
) -> None:
    await open_all(nodes, 1)
    await append_quorum(clients(nodes), 2, STREAM, PARTITION, 1, [batch(0, 5)])
    await nodes["storage-a"].stop()
    # R = 3, Q = 2: two answers are enough to know every acknowledged entry.
    fenced = await fence_quorum(clients(nodes), 2, STREAM, PARTITION, 2)
    assert len(fenced.answers) >= 2
    assert max(fenced.answers.values()) == 4
    # The old owner (epoch 1) can no longer reach a quorum: both live replicas refuse.
    with pytest.raises(Unavailable, match="no quorum"):
        await append_quorum(clients(nodes), 2, STREAM, PARTITION, 1, [batch(5, 1)])
    with pytest.raises(FailedPrecondition, match="stale epoch 1"):
        await nodes["storage-b"].client.append(STREAM, PARTITION, 1, [batch(5, 1)])
    # With a second node down too, the fence itself has no quorum.
    await nodes["storage-b"].stop()
    with pytest.raises(Unavailable, match="no quorum: 1 of 3 replicas reachable, 2 needed"):
        await fence_quorum(clients(nodes), 2, STREAM, PARTITION, 3)


async def test_recovery_copies_the_missing_tail_to_every_responder(
    nodes: dict[str, Node],
) -> None:
    await open_all(nodes, 1)
    await append_quorum(clients(nodes), 3, STREAM, PARTITION, 1, [batch(0, 4)])
    # Two replicas got the next batches (a quorum acked them); storage-c missed them.
    for name in ("storage-a", "storage-b"):
        await nodes[name].client.append(STREAM, PARTITION, 1, [batch(4, 3), batch(7, 2)])
    # Whichever two answer first, one of them has offset 8, and every responder ends there.
    recovery = await recover_ledger_end(clients(nodes), 2, STREAM, PARTITION, 2)
    end, fenced = recovery.end, recovery.fenced
    assert end == 8
    for name in fenced.answers:
        batches, next_offset = await nodes[name].client.read(STREAM, PARTITION, 0, 100)
        assert next_offset == 9
        payloads = [
            p for b in batches for p in decode_batch(b.arrow_ipc).column("payload").to_pylist()
        ]
        assert payloads == [f"m{o}".encode() for o in range(9)]
    # With storage-a down, the next recovery hears from b and c: c ends at 8 too
    # (caught up now or by the first recovery).
    await nodes["storage-a"].stop()
    recovery = await recover_ledger_end(clients(nodes), 2, STREAM, PARTITION, 3)
    end, fenced = recovery.end, recovery.fenced
    assert end == 8
    assert set(fenced.answers) == {"storage-b", "storage-c"}
    _, next_offset = await nodes["storage-c"].client.read(STREAM, PARTITION, 0, 100)
    assert next_offset == 9


def payloads_on(batches: list[Batch]) -> list[bytes]:
    return [p for b in batches for p in decode_batch(b.arrow_ipc).column("payload").to_pylist()]


async def read_all(client: StorageClient) -> tuple[list[Batch], int]:
    """Every batch the node behind `client` stores (segments, then its WAL), and its end."""
    found: list[Batch] = []
    offset = 0
    while True:
        batches, next_offset = await client.read(STREAM, PARTITION, offset, 1000, from_cache=False)
        if next_offset <= offset:
            return found, offset
        found += [b for b in batches if b.base_offset >= offset]
        offset = next_offset


async def stored(node: Node) -> list[bytes]:
    return payloads_on((await read_all(node.client))[0])


async def reaches(client: StorageClient, end: int) -> None:
    """Wait until the node behind `client` stores offsets up to `end` (an append is
    acknowledged at Q answers; the last replica's may still be in flight)."""

    async def there() -> bool:
        return (await read_all(client))[1] >= end

    await eventually(there, 30.0, f"the replica stores offsets up to {end}")


def replicated_log(
    nodes: dict[str, Node],
    takes_appends: tuple[str, ...],
    reachable: dict[str, StorageClient],
    epoch: int = 1,
    next_offset: int = 0,
) -> PartitionLog:
    """A log on the ensemble a, b, c (Q = 2) appending to `takes_appends`; the others
    are caught up once `reachable` names them."""
    replicas = {n: nodes[n].client for n in takes_appends}
    return PartitionLog(
        STREAM,
        PARTITION,
        epoch,
        replicas[takes_appends[0]],
        LogBounds(0, next_offset),
        replicas=replicas,
        quorum=2,
        ensemble=tuple(nodes),
        client_for=reachable.get,
    )


async def append(log: PartitionLog, first: int, count: int) -> None:
    assert (await log.append(batch(first, count).arrow_ipc, count)).base_offset == first


async def test_a_replica_that_missed_appends_is_caught_up_and_takes_appends_again(
    nodes: dict[str, Node],
) -> None:
    await open_all(nodes, 1)
    reachable: dict[str, StorageClient] = {}  # storage-c not registered yet
    partition_log = replicated_log(nodes, ("storage-a", "storage-b"), reachable)
    try:
        for first in range(0, 20, 4):
            await append(partition_log, first, 4)
        assert partition_log.lagging() == ["storage-c"]
        reachable["storage-c"] = nodes["storage-c"].client  # it is back
        await eventually(lambda: not partition_log.lagging(), 30.0, "storage-c takes appends again")
        await append(partition_log, 20, 3)
        await reaches(nodes["storage-c"].client, 23)
    finally:
        await partition_log.close()
    batches, next_offset = await nodes["storage-c"].client.read(
        STREAM, PARTITION, 0, 100, from_cache=False
    )
    assert next_offset == 23
    assert payloads_on(batches) == [f"m{o}".encode() for o in range(23)]


async def test_a_replica_that_fails_an_append_stops_taking_them_and_is_caught_up(
    nodes: dict[str, Node],
) -> None:
    await open_all(nodes, 1)
    reachable = clients(nodes)
    partition_log = replicated_log(nodes, tuple(nodes), reachable)
    restarted = Node(nodes["storage-c"].data_dir)  # started once the first one is stopped
    try:
        await append(partition_log, 0, 5)
        await nodes["storage-c"].stop()
        await append(partition_log, 5, 5)  # acked by a and b; c failed it
        assert partition_log.lagging() == ["storage-c"]
        await restarted.server.start()  # storage-c comes back on its directory
        reachable["storage-c"] = restarted.client
        await append(partition_log, 10, 2)
        await eventually(lambda: not partition_log.lagging(), 30.0, "storage-c takes appends again")
        await append(partition_log, 12, 1)
        await reaches(restarted.client, 13)
        batches, next_offset = await restarted.client.read(
            STREAM, PARTITION, 0, 100, from_cache=False
        )
    finally:
        await partition_log.close()
        await restarted.stop()
        await restarted.client.close()
        await restarted.channel.close()
    assert next_offset == 13
    assert payloads_on(batches) == [f"m{o}".encode() for o in range(13)]


def at(base: int, payload_base: int, count: int) -> Batch:
    """A batch at offset `base` holding the payloads `batch(payload_base, count)` has."""
    other = batch(payload_base, count)
    return Batch(base, count, other.publish_time_us, other.arrow_ipc)


async def keep_a_tail_past_the_recovered_end(nodes: dict[str, Node]) -> None:
    """Offsets 0-1 on a, b and c (epoch 1); storage-c also got offsets 2-4 (m40-m42),
    which no quorum acknowledged: the old owner died, and the recovery of epoch 2
    did not hear from storage-c, so it ended the ledger at 1 on a and b."""
    await open_all(nodes, 1)
    await append_quorum(clients(nodes), 3, STREAM, PARTITION, 1, [batch(0, 2)])
    await nodes["storage-c"].client.append(STREAM, PARTITION, 1, [at(2, 40, 1), at(3, 41, 2)])
    for name in ("storage-a", "storage-b"):
        await nodes[name].client.open_partition(STREAM, PARTITION, 2)


async def _publishes(stream: str, partition: int) -> bool:
    return True


@contextlib.asynccontextmanager
async def committed_to_a_segment_store(
    nodes: dict[str, Node], store_dir: Path
) -> AsyncIterator[Node]:
    """storage-c seals what it holds and, restarted with a segment store (in
    `store_dir`), commits it there: its sealed offsets can no longer be cut. The
    restarted node takes storage-c's place in `nodes` meanwhile."""
    sealed = await nodes["storage-c"].store.get(STREAM, PARTITION)
    await sealed.seal(1 << 20)
    await nodes["storage-c"].stop()
    publisher = Publisher(SegmentStore.open(store_dir.as_uri()), _publishes)
    restarted = Node(nodes["storage-c"].data_dir, publisher)
    await restarted.server.start()
    stopped, nodes["storage-c"] = nodes["storage-c"], restarted
    try:
        await publisher.publish(await restarted.store.get(STREAM, PARTITION))
        yield restarted
    finally:
        nodes["storage-c"] = stopped
        await restarted.stop()
        await restarted.client.close()
        await restarted.channel.close()


async def test_a_replica_holding_entries_past_the_recovered_end_is_truncated_and_rejoins(
    nodes: dict[str, Node],
) -> None:
    await keep_a_tail_past_the_recovered_end(nodes)
    reachable: dict[str, StorageClient] = {}  # storage-c not registered yet
    partition_log = replicated_log(
        nodes, ("storage-a", "storage-b"), reachable, epoch=2, next_offset=2
    )
    try:
        await append(partition_log, 2, 1)  # offsets 2-4 again, with other data
        for first in range(3, 9, 2):
            await append(partition_log, first, 2)
        reachable["storage-c"] = nodes["storage-c"].client  # it is back
        await eventually(lambda: not partition_log.lagging(), 30.0, "storage-c takes appends again")
        await append(partition_log, 9, 3)  # sent to all three
        for node in nodes.values():
            await reaches(node.client, 12)
    finally:
        await partition_log.close()
    expected = [f"m{o}".encode() for o in range(12)]
    # Every offset has one payload, whichever replica serves it: m40-m42 are gone.
    for node in nodes.values():
        assert await stored(node) == expected
    assert not partition_log.catch_up_errors


async def test_a_responder_holding_a_stale_tail_is_not_copied_over_and_is_cut_by_the_catch_up(
    nodes: dict[str, Node],
) -> None:
    # storage-c kept m40-m42 at offsets 2-4 (its catch-up, which would have cut them,
    # was interrupted by a change of owner); epoch 2 wrote offsets 2-8 on a and b.
    await keep_a_tail_past_the_recovered_end(nodes)
    for name in ("storage-a", "storage-b"):
        await nodes[name].client.append(STREAM, PARTITION, 2, [batch(2, 3), batch(5, 4)])
    # The next owner hears from a and c: c answers with offset 4, a with 8.
    answering = {n: nodes[n].client for n in ("storage-a", "storage-c")}
    recovery = await recover_ledger_end(answering, 2, STREAM, PARTITION, 3, ensemble_size=3)
    assert (recovery.end, recovery.diverged) == (8, frozenset({"storage-c"}))
    # Nothing was copied after c's stale tail: it would have stayed below the end.
    assert (await read_all(nodes["storage-c"].client))[1] == 5
    # The new log appends to a and b (both at the end) and catches c up.
    await nodes["storage-b"].client.open_partition(STREAM, PARTITION, 3)
    partition_log = replicated_log(
        nodes, ("storage-a", "storage-b"), clients(nodes), epoch=3, next_offset=9
    )
    try:
        await eventually(lambda: not partition_log.lagging(), 60.0, "storage-c takes appends")
        await append(partition_log, 9, 2)
        for node in nodes.values():
            await reaches(node.client, 11)
    finally:
        await partition_log.close()
    expected = [f"m{o}".encode() for o in range(11)]
    for node in nodes.values():
        assert await stored(node) == expected


async def test_a_non_responder_ending_at_the_recovered_end_with_a_stale_tail_is_not_at_the_end(
    nodes: dict[str, Node],
) -> None:
    # storage-c's stale m40-m42 end at offset 4, where epoch 2's entries on a and b do.
    await keep_a_tail_past_the_recovered_end(nodes)
    for name in ("storage-a", "storage-b"):
        await nodes[name].client.append(STREAM, PARTITION, 2, [batch(2, 3)])
    answering = {n: nodes[n].client for n in ("storage-a", "storage-b")}
    recovery = await recover_ledger_end(answering, 2, STREAM, PARTITION, 3, ensemble_size=3)
    assert recovery.end == 4
    held = await recovery.holding_log(clients(nodes), STREAM, PARTITION)
    assert set(held) == {"storage-a", "storage-b"}


async def test_a_lagging_replica_whose_log_is_sealed_is_caught_up_without_truncation(
    nodes: dict[str, Node],
) -> None:
    await open_all(nodes, 1)
    await append_quorum(clients(nodes), 3, STREAM, PARTITION, 1, [batch(0, 3), batch(3, 2)])
    sealed = await nodes["storage-c"].store.get(STREAM, PARTITION)
    await sealed.seal(1 << 20)
    await sealed.trim_wal()  # storage-c serves offsets 0-4 re-encoded from its segment
    reachable: dict[str, StorageClient] = {}  # storage-c not registered yet
    partition_log = replicated_log(nodes, ("storage-a", "storage-b"), reachable, next_offset=5)
    try:
        await append(partition_log, 5, 2)
        reachable["storage-c"] = nodes["storage-c"].client
        await eventually(lambda: not partition_log.lagging(), 30.0, "storage-c takes appends again")
        await append(partition_log, 7, 1)
        await reaches(nodes["storage-c"].client, 8)
    finally:
        await partition_log.close()
    assert await stored(nodes["storage-c"]) == [f"m{o}".encode() for o in range(8)]


async def test_a_sealed_tail_the_segment_store_committed_is_never_truncated_and_stays_out(
    nodes: dict[str, Node], tmp_path: Path
) -> None:
    await keep_a_tail_past_the_recovered_end(nodes)
    async with committed_to_a_segment_store(nodes, tmp_path / "store") as storage_c:
        partition_log = replicated_log(
            nodes, ("storage-a", "storage-b"), clients(nodes), epoch=2, next_offset=2
        )
        try:
            for first in range(2, 8, 2):
                await append(partition_log, first, 2)
            await eventually(
                lambda: "storage-c" in partition_log.catch_up_errors,
                30.0,
                "storage-c was looked at",
            )
            error = partition_log.catch_up_errors["storage-c"]
            assert "offsets below 5 are sealed and committed to the segment store" in error
            await append(partition_log, 8, 1)
            assert partition_log.lagging() == ["storage-c"]
        finally:
            await partition_log.close()
        # Left as it was, and never read: it is not a replica of the log.
        assert await stored(storage_c) == [b"m0", b"m1", b"m40", b"m41", b"m42"]
    assert await stored(nodes["storage-a"]) == [f"m{o}".encode() for o in range(9)]


async def test_a_replica_down_too_long_is_replaced_by_a_spare_holding_every_entry(
    nodes: dict[str, Node], tmp_path: Path
) -> None:
    await open_all(nodes, 1)
    spare = Node(tmp_path / "storage-d")
    await spare.server.start()
    # storage-c is down (not registered); storage-d is a registered spare.
    reachable = {n: nodes[n].client for n in ("storage-a", "storage-b")}
    reachable["storage-d"] = spare.client
    partition_log, recorded = replaced_by_spare(nodes, reachable, 1, LogBounds(0, 0))
    try:
        for first in range(0, 12, 3):
            await append(partition_log, first, 3)
        await eventually(
            lambda: recorded == [("storage-c", "storage-d")], 30.0, "storage-d replaced storage-c"
        )
        assert partition_log.ensemble == ("storage-a", "storage-b", "storage-d")
        assert not partition_log.lagging()
        await append(partition_log, 12, 2)
        await reaches(spare.client, 14)
        batches, next_offset = await spare.client.read(STREAM, PARTITION, 0, 100, from_cache=False)
    finally:
        await partition_log.close()
        await spare.stop()
        await spare.client.close()
        await spare.channel.close()
    assert next_offset == 14
    assert payloads_on(batches) == [f"m{o}".encode() for o in range(14)]


def replaced_by_spare(
    nodes: dict[str, Node],
    reachable: dict[str, StorageClient],
    epoch: int,
    bounds: LogBounds,
) -> tuple[PartitionLog, list[tuple[str, str]]]:
    """A log appending to storage-a and storage-b of the a-b-c ensemble, whose
    re-replication replaces a replica by the spare storage-d; and the replacements
    it records, (old, new)."""
    recorded: list[tuple[str, str]] = []

    async def record(old: str, new: str) -> None:
        recorded.append((old, new))

    def spare_for(ensemble: tuple[str, ...]) -> str | None:
        return None if "storage-d" in ensemble else "storage-d"

    replicas = {n: nodes[n].client for n in ("storage-a", "storage-b")}
    log = PartitionLog(
        STREAM,
        PARTITION,
        epoch,
        replicas["storage-a"],
        bounds,
        replicas=replicas,
        quorum=2,
        ensemble=tuple(nodes),
        client_for=reachable.get,
        rereplicate=Rereplicate(spare_for, record, after_s=0.5),
    )
    return log, recorded
