"""Power loss: a storage process whose data directory sits on a simulated disk that forgets
everything not fsynced (`tamto_testing.power_loss`), cut while appends, cursor commits and
seals are in flight, again and again.

After every cut storage restarts on what the disk kept, and the test checks, through
storage's own gRPC API as the router uses it, that every append storage acknowledged is
read back whole (payloads exact, offsets contiguous) and that no committed cursor went
back. The simulator keeps torn and zero-filled tails of unsynced appends at random, so
recovery must cut those off and never serve them.

CI runs `CUTS_SHORT` cuts; `TAMTO_LONG_TESTS=1` runs the acceptance's 50 (docs/testing.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from storage_testkit import make_batch, payload_for

from tamto_common.channels import peer_channel
from tamto_protocol.batch import decode_batch
from tamto_protocol.v1 import messages_pb2, storage_pb2, storage_pb2_grpc
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.needs import missing
from tamto_testing.power_loss import PowerLossDisk, unavailable_reason
from tamto_testing.waiting import eventually, long_tests_enabled

CUTS_SHORT = 3
CUTS_LONG = 50
PARTITIONS = 2
SUBSCRIPTIONS = ("audit", "billing")
#: Small WAL files and segments, sealed early, so cuts also land in rolls and seals.
STORAGE_ENV = {
    "TAMTO_STORAGE_WAL_FILE_BYTES": str(256 * 1024),
    "TAMTO_STORAGE_SEGMENT_BYTES": str(128 * 1024),
    "TAMTO_STORAGE_SEAL_AGE_MS": "300",
    "TAMTO_STORAGE_SEAL_CHECK_MS": "100",
}
SEED = int(os.environ.get("TAMTO_POWER_LOSS_SEED", "19"))


@dataclass
class Ledger:
    """What storage acknowledged, per partition: the end of acked appends and cursor floors."""

    acked_end: dict[int, int] = field(default_factory=lambda: dict.fromkeys(range(PARTITIONS), 0))
    floors: dict[tuple[int, str], int] = field(default_factory=dict)
    appends: int = 0
    commits: int = 0


def ref(partition: int) -> Any:
    return storage_pb2.PartitionRef(stream="power", partition=partition)


async def append_until_stopped(
    stub: Any, partition: int, epoch: int, next_offset: int, ledger: Ledger, rng: random.Random
) -> None:
    """One append in flight at a time, as a router sends them; each ack moves acked_end."""
    while True:
        count = rng.randint(1, 20)
        batch = make_batch(next_offset, count, pad=rng.randint(0, 400))
        wire = messages_pb2.StoredBatch(
            base_offset=batch.base_offset,
            count=batch.count,
            publish_time_us=batch.publish_time_us,
            arrow_ipc=bytes(batch.arrow_ipc),
        )
        answer = await stub.Append(
            storage_pb2.StorageAppendRequest(partition=ref(partition), epoch=epoch, batches=[wire])
        )
        next_offset = answer.next_offset
        ledger.acked_end[partition] = max(ledger.acked_end[partition], next_offset)
        ledger.appends += 1


async def commit_until_stopped(stub: Any, epoch: int, ledger: Ledger, rng: random.Random) -> None:
    """Cursor commits moving forward within acked data; a floor counts once storage answered."""
    while True:
        partition, subscription = rng.randrange(PARTITIONS), rng.choice(SUBSCRIPTIONS)
        key = (partition, subscription)
        low = ledger.floors.get(key, 0)
        high = ledger.acked_end[partition]
        floor = rng.randint(low, high) if high > low else low
        await stub.CommitCursor(
            storage_pb2.CommitCursorRequest(
                partition=ref(partition),
                subscription=subscription,
                epoch=epoch,
                ack_floor=floor,
                acked_above_floor=[messages_pb2.OffsetRange(first=floor + 2, last=floor + 3)],
            )
        )
        ledger.floors[key] = max(low, floor)
        ledger.commits += 1
        await asyncio.sleep(rng.uniform(0, 0.02))


async def check_after_restart(stub: Any, epoch: int, ledger: Ledger) -> dict[int, int]:
    """Every acked offset, and all else served, reads back exactly; no committed floor went
    back. The partitions' next offsets."""
    next_offsets = {}
    for partition in range(PARTITIONS):
        opened = await stub.OpenPartition(
            storage_pb2.OpenPartitionRequest(partition=ref(partition), epoch=epoch)
        )
        acked = ledger.acked_end[partition]
        assert opened.next_offset >= acked, (
            f"partition {partition}: storage restarted at {opened.next_offset}, "
            f"but acknowledged appends up to {acked}"
        )
        # Everything storage serves, acked or kept from before the cut, is what was written:
        # a torn or zero-filled tail is never served.
        offset = 0
        while offset < opened.next_offset:
            read = await stub.Read(
                storage_pb2.ReadRequest(partition=ref(partition), from_offset=offset)
            )
            assert read.batches, f"partition {partition}: nothing read at offset {offset}"
            for batch in read.batches:
                values = decode_batch(batch.arrow_ipc).column("payload").to_pylist()
                for i, value in enumerate(values):
                    at = batch.base_offset + i
                    if at == offset:
                        assert value.rstrip(b"x") == payload_for(at), f"offset {at}"
                        offset += 1
        next_offsets[partition] = opened.next_offset
        for subscription in SUBSCRIPTIONS:
            floor = ledger.floors.get((partition, subscription))
            if floor is None:
                continue
            cursor = await stub.GetCursor(
                storage_pb2.GetCursorRequest(partition=ref(partition), subscription=subscription)
            )
            where = f"partition {partition} subscription {subscription}"
            assert cursor.exists, f"{where}: committed floor {floor}, no cursor after the cut"
            assert cursor.ack_floor >= floor, (
                f"{where}: committed floor {floor}, after the cut {cursor.ack_floor}"
            )
    return next_offsets


def kill_storage(cluster: TestCluster) -> None:
    if "storage" in cluster.processes:
        cluster.kill9("storage")


def first_acks(ledger: Ledger, before: int, tasks: list[asyncio.Task[None]]) -> Callable[[], bool]:
    """True once every partition's writer had an ack since `before` (or a writer stopped)."""
    return lambda: ledger.appends > before + PARTITIONS or any(t.done() for t in tasks)


@pytest.mark.timeout(3600 if long_tests_enabled() else 300)
async def test_acked_appends_and_committed_cursors_survive_power_cuts(
    tamto_infra: Infra, tmp_path: Path
) -> None:
    missing(unavailable_reason())
    cuts = CUTS_LONG if long_tests_enabled() else CUTS_SHORT
    rng = random.Random(SEED)
    cluster = TestCluster(tmp_path / "cluster", tamto_infra)
    disk = PowerLossDisk(tmp_path / "disk", cluster.workdir / "storage", seed=SEED)
    ledger = Ledger()
    with contextlib.ExitStack() as cleanup:
        disk.mount()
        cleanup.callback(disk.close)
        # Runs first: the mount cannot go while storage still holds files on it.
        cleanup.callback(kill_storage, cluster)
        for cut in range(cuts + 1):
            cluster.start("storage", extra_env=STORAGE_ENV)
            epoch = cut + 1  # a new owner after every restart, as a router's takeover
            # Tamto's channel options: gRPC's default backoff would fail the first calls
            # with "Connection refused" for up to seconds after the restart, on a
            # connection the last cut's channel left in backoff (tamto_protocol.reconnect).
            async with peer_channel(cluster.address("storage")) as channel:
                await asyncio.wait_for(channel.channel_ready(), 30)
                stub = storage_pb2_grpc.StorageStub(channel)
                next_offsets = await check_after_restart(stub, epoch, ledger)
                if cut == cuts:
                    break
                tasks = [
                    asyncio.create_task(
                        append_until_stopped(stub, p, epoch, next_offsets[p], ledger, rng)
                    )
                    for p in range(PARTITIONS)
                ]
                tasks.append(asyncio.create_task(commit_until_stopped(stub, epoch, ledger, rng)))
                # Publish for a while (from the first acks on), then the power goes, mid-flight.
                await eventually(
                    first_acks(ledger, ledger.appends, tasks),
                    30,
                    "storage to acknowledge its first appends",
                )
                done, _ = await asyncio.wait(tasks, timeout=rng.uniform(0.1, 1.0))
                for task in done:
                    task.result()  # a failure before the cut is a failure of the test
                disk.power_off()
                # Let storage run into the dead disk for a moment (or not), then it dies too.
                await asyncio.sleep(rng.uniform(0, 0.05))
                cluster.kill9("storage")
                for task in tasks:
                    task.cancel()
                for task in tasks:
                    with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                        await task
            report = disk.cut()
            print(f"cut {cut + 1}/{cuts}: acked {dict(ledger.acked_end)}; disk: {report}")
            disk.mount()
        assert cluster.stop("storage") == 0, cluster.processes["storage"].log_tail()
    assert ledger.appends > cuts
    assert ledger.commits > 0
