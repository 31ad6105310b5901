"""Storage's gauge of acked bytes not sealed into Parquet yet, read the way
`tamto bench` waits for it between phases: positive once messages are acked,
0 once the sealer has written them (by age, here after 3 s)."""

from __future__ import annotations

from pathlib import Path

import pytest

import tamto_sdk
from tamto_bench.harness import unsealed_bytes
from tamto_protocol.segment import read_manifest
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.waiting import eventually

from .members import own_members

pytestmark = pytest.mark.e2e

STREAM = "unsealed"
TOTAL = 1_000
STORAGE_ENV = {"TAMTO_STORAGE_SEAL_AGE_MS": "3000", "TAMTO_STORAGE_SEAL_CHECK_MS": "100"}


async def test_storage_reports_what_it_has_not_sealed_yet(
    tamto_infra: Infra, tmp_path: Path
) -> None:
    with TestCluster(tmp_path / "cluster", tamto_infra).running(
        {"storage": STORAGE_ENV}
    ) as cluster:
        await check_the_gauge(cluster)


async def check_the_gauge(cluster: TestCluster) -> None:
    storage = (await own_members(cluster))["storage"]
    urls = [f"http://{storage.metrics_address}/metrics"]
    assert await unsealed_bytes(urls) == 0, "nothing published yet"
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        await client.streams.ensure(STREAM, partitions=2)
        async with client.producer(STREAM) as producer:
            await producer.send_batch([b"x" * 100] * TOTAL)
    # Acked a moment ago, well within the seal age: all of it waits for the sealer.
    assert await unsealed_bytes(urls) > 100 * TOTAL

    stream_dir = cluster.workdir / "storage" / "streams" / STREAM

    async def sealed() -> bool:
        return await unsealed_bytes(urls) == 0

    await eventually(sealed, 30, "the sealer wrote every acked byte")
    assert sum(read_manifest(stream_dir).end_offsets().values()) == TOTAL
