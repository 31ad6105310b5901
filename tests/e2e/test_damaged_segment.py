"""A flipped bit in a sealed segment, with real processes.

Before: storage logged `unhandled error` on every read of the damaged segment, a
consumer from earliest saw nothing and no error, and publishing failed with a
retryable UNAVAILABLE, because claiming the partition (a router restart) reads
the log. Now: the claim and publishing work, a consumer reaching the damaged
range gets the SDK's `DataLoss` naming the file and the offsets, a consumer
starting after it reads on, and the documented repair (`tamto storage verify` /
`repair`, storage stopped) returns the partition to service with the loss in
the audit file.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import tamto_sdk
from tamto_protocol.segment import read_manifest, segment_file_name
from tamto_sdk import Start
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.waiting import eventually

from ..programs import run_to_end

pytestmark = pytest.mark.e2e

STREAM = "damaged"
#: Storage seals every stored batch into its own segment, at once.
STORAGE_ENV = {
    "TAMTO_STORAGE_SEAL_AGE_MS": "100",
    "TAMTO_STORAGE_SEAL_CHECK_MS": "100",
    "TAMTO_STORAGE_SEGMENT_BYTES": "1",
}


@pytest.fixture
def cluster(tamto_infra: Infra, tmp_path: Path) -> Iterator[TestCluster]:
    with TestCluster(tmp_path / "cluster", tamto_infra).running({"storage": STORAGE_ENV}) as c:
        yield c


def tamto_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_to_end([sys.executable, "-m", "tamto_cli", *args], timeout=120)


async def receive(
    client: tamto_sdk.Client, sub: str, start: tamto_sdk.StartPosition, n: int
) -> list[bytes]:
    got: list[bytes] = []
    async with client.consumer(STREAM, sub, start=start) as consumer:
        while len(got) < n:
            batch = await consumer.receive_batch(max_messages=n, timeout_s=15)
            assert len(batch) > 0, f"only {len(got)} of {n} delivered"
            got.extend(m.payload for m in batch)
            consumer.ack(batch)
    return got


async def test_a_damaged_segment_is_data_loss_for_its_offsets_and_repair_restores_service(
    cluster: TestCluster,
) -> None:
    storage_dir = cluster.workdir / "storage"
    stream_dir = storage_dir / "streams" / STREAM
    payloads = [f"m{i:02d}".encode() for i in range(30)]
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        await client.streams.ensure(STREAM, partitions=1)
        async with client.producer(STREAM) as producer:
            for first in (0, 10, 20):  # three stored batches: three segments
                sent = [await producer.send(p) for p in payloads[first : first + 10]]
                await asyncio.gather(*sent)

    def sealed() -> bool:
        return read_manifest(stream_dir).end_offsets().get(0, 0) >= 30

    await eventually(sealed, 30, "every message sealed")
    damaged = stream_dir / "partition=0" / segment_file_name(10, 19)
    assert damaged.exists()
    # Both stop: the router claims the partition again (reading the log) when it is back.
    cluster.stop("router")
    cluster.stop("storage")
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0x04
    damaged.write_bytes(bytes(data))
    cluster.start("storage", extra_env=STORAGE_ENV)
    cluster.start("router")

    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        async with client.producer(STREAM) as producer:
            after = await producer.send_and_wait(b"after")  # the claim did not fail
        assert after.offset == 30
        assert await receive(client, "late", Start.offset(20), 11) == [*payloads[20:], b"after"]
        with pytest.raises(tamto_sdk.errors.DataLoss) as info:
            await receive(client, "early", Start.earliest(), 31)
        assert str(damaged) in str(info.value)
        assert "offsets 10-19" in str(info.value)

    cluster.stop("storage")
    verify = tamto_cli("storage", "verify", "--data-dir", str(storage_dir))
    assert verify.returncode == 1, verify.stderr
    assert f"segment {STREAM}/0 offsets 10-19: {damaged}" in verify.stdout
    repair = tamto_cli("storage", "repair", "--data-dir", str(storage_dir), "--yes")
    assert repair.returncode == 0, repair.stdout + repair.stderr
    [record] = [json.loads(line) for line in (storage_dir / "audit.jsonl").read_text().splitlines()]
    assert record["action"] == "storage.repair"
    assert "offsets 10-19 lost" in record["detail"]
    cluster.start("storage", extra_env=STORAGE_ENV)

    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        expected = [*payloads[:10], *payloads[20:], b"after"]
        assert await receive(client, "repaired", Start.earliest(), 21) == expected
        async with client.producer(STREAM) as producer:
            assert (await producer.send_and_wait(b"again")).offset == 31
