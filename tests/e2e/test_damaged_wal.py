"""A flipped bit in a WAL frame, and a missing WAL file, with real processes.

Before: the damage was found precisely, but no offset of the partition could be
read any more, not even the intact ones below it, and nothing said how to get
the partition back. Now: the router claims the partition, a consumer reads the
offsets below the damage and then gets the SDK's `DataLoss` naming the WAL file
and the first offset lost; a publish is refused with `DataLoss` too (appending
would reuse offsets already acknowledged), never retried; `tamto storage
repair` records the damaged frame's offsets as lost, keeps the frames after it,
and the partition serves and accepts publishes again.

A WAL file missing between two others: the same until repair, which records
exactly the missing file's offsets as lost, keeps every frame of the files
after it, leaves nothing for a second pass to do, and the log's end where the
damaged partition reported it (a router's ledger starts there: before, repair
moved the intact files after the gap aside one pass at a time, and publishing
then failed FAILED_PRECONDITION below an epoch's start).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

import tamto_sdk
from tamto_sdk import Start
from tamto_storage.wal_recovery import recover
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra

from .test_damaged_segment import receive, tamto_cli

pytestmark = pytest.mark.e2e

STREAM = "damaged"
#: Nothing is sealed while the test runs: the messages stay in the WAL only.
STORAGE_ENV = {"TAMTO_STORAGE_SEAL_AGE_MS": "3600000"}


@pytest.fixture
def cluster(tamto_infra: Infra, tmp_path: Path) -> Iterator[TestCluster]:
    with TestCluster(tmp_path / "cluster", tamto_infra).running({"storage": STORAGE_ENV}) as c:
        yield c


async def publish_batches(cluster: TestCluster, payloads: list[bytes], size: int) -> None:
    """`payloads` in stored batches of `size` (each a WAL frame), then storage killed
    (a clean stop would seal the WAL into Parquet) and the router stopped."""
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        await client.streams.ensure(STREAM, partitions=1)
        async with client.producer(STREAM) as producer:
            for first in range(0, len(payloads), size):
                sent = [await producer.send(p) for p in payloads[first : first + size]]
                await asyncio.gather(*sent)
    cluster.stop("router")
    cluster.kill9("storage")


async def test_wal_damage_keeps_the_offsets_below_readable_and_repair_restores_service(
    cluster: TestCluster,
) -> None:
    storage_dir = cluster.workdir / "storage"
    wal_dir = storage_dir / "streams" / STREAM / "partition=0" / "_wal"
    payloads = [f"m{i:02d}".encode() for i in range(30)]
    await publish_batches(cluster, payloads, 10)  # three stored batches: three WAL frames
    entries = recover(wal_dir, truncate=False).entries
    assert [(e.base_offset, e.count) for e in entries] == [(0, 10), (10, 10), (20, 10)]
    middle = entries[1]
    with middle.file.open("r+b") as f:  # one bit of the middle frame's body
        f.seek(middle.position + 36 + middle.body_length // 2)
        value = f.read(1)[0]
        f.seek(-1, 1)
        f.write(bytes([value ^ 0x10]))
    cluster.start("storage", extra_env=STORAGE_ENV)
    cluster.start("router")

    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        assert await receive(client, "below", Start.earliest(), 10) == payloads[:10]
        with pytest.raises(tamto_sdk.errors.DataLoss) as read_error:
            await receive(client, "across", Start.earliest(), 30)
        assert str(middle.file) in str(read_error.value)
        assert "offsets 10-" in str(read_error.value)
        async with client.producer(STREAM) as producer:
            with pytest.raises(tamto_sdk.errors.DataLoss, match="offsets 10-"):
                await asyncio.wait_for(producer.send_and_wait(b"refused"), 30)

    cluster.stop("router")
    cluster.stop("storage")
    repair = tamto_cli("storage", "repair", "--data-dir", str(storage_dir), "--yes")
    assert repair.returncode == 0, repair.stdout + repair.stderr
    assert "offsets 10-19 lost" in repair.stdout
    assert "offsets 10-19 lost" in (storage_dir / "audit.jsonl").read_text()
    cluster.start("storage", extra_env=STORAGE_ENV)
    cluster.start("router")

    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        async with client.producer(STREAM) as producer:
            assert (await producer.send_and_wait(b"after")).offset == 30
        expected = [*payloads[:10], *payloads[20:], b"after"]
        assert await receive(client, "repaired", Start.earliest(), 21) == expected


#: Every stored batch in a WAL file of its own.
ONE_FRAME_FILES = {**STORAGE_ENV, "TAMTO_STORAGE_WAL_FILE_BYTES": "1"}


async def test_a_missing_wal_file_loses_its_offsets_only_and_repair_keeps_the_files_after_it(
    tamto_infra: Infra, tmp_path: Path
) -> None:
    cluster = TestCluster(tmp_path / "cluster", tamto_infra)
    with cluster.running({"storage": ONE_FRAME_FILES}):
        storage_dir = cluster.workdir / "storage"
        wal_dir = storage_dir / "streams" / STREAM / "partition=0" / "_wal"
        payloads = [f"m{i:02d}".encode() for i in range(40)]
        await publish_batches(cluster, payloads, 10)
        files = sorted(wal_dir.glob("*.log"))
        assert [(e.base_offset, e.file) for e in recover(wal_dir, truncate=False).entries] == [
            (0, files[0]),
            (10, files[1]),
            (20, files[2]),
            (30, files[3]),
        ]
        files[1].unlink()  # offsets 10-19
        cluster.start("storage", extra_env=ONE_FRAME_FILES)
        cluster.start("router")
        async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
            assert await receive(client, "below", Start.earliest(), 10) == payloads[:10]
            async with client.producer(STREAM) as producer:
                with pytest.raises(tamto_sdk.errors.DataLoss, match="offsets 10-"):
                    await asyncio.wait_for(producer.send_and_wait(b"refused"), 30)

        cluster.stop("router")
        cluster.stop("storage")
        data = ("--data-dir", str(storage_dir))
        found = tamto_cli("storage", "verify", *data)
        assert found.returncode == 1, found.stdout + found.stderr
        repair = tamto_cli("storage", "repair", *data, "--yes")
        assert repair.returncode == 0, repair.stdout + repair.stderr
        assert "offsets 10-19 lost" in repair.stdout
        assert "lost" not in repair.stdout.replace("offsets 10-19 lost", "")
        again = tamto_cli("storage", "repair", *data, "--yes")
        assert again.returncode == 0, again.stdout + again.stderr
        assert "no damage found, nothing to repair" in again.stdout
        cluster.start("storage", extra_env=ONE_FRAME_FILES)
        cluster.start("router")

        async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
            async with client.producer(STREAM) as producer:
                assert (await producer.send_and_wait(b"after")).offset == 40
            expected = [*payloads[:10], *payloads[20:], b"after"]
            assert await receive(client, "repaired", Start.earliest(), 31) == expected
