"""The whole system on the power-loss simulator: the test cluster's data
directory (the dev-credential, auth's signing keys, storage's logs and cursors) on
`tamto_testing.power_loss`, and the power cut while an SDK producer publishes with ids: the
disk fails, every service dies with kill -9, only what was fsynced remains, and everything
starts again on it. The same credential and client keep working, and a fresh subscription
reads every acknowledged message. (The storage-level campaign with committed cursors and 50
cuts is `services/storage/tests/test_storage_power_loss.py`.)"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable
from pathlib import Path

import pytest

import tamto_sdk
from tamto_common.dev_credential import load_dev_credential
from tamto_local.layout import SERVICES
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.needs import needs
from tamto_testing.power_loss import PowerLossDisk, unavailable_reason
from tamto_testing.waiting import eventually, long_tests_enabled

pytestmark = [
    pytest.mark.e2e,
    needs(unavailable_reason()),
]

STREAM = "powered"
CUTS = 10 if long_tests_enabled() else 1
BATCH = 50


async def publish_until_cancelled(client: tamto_sdk.Client, acked: set[str]) -> None:
    """Batches with ids, one after the other; a batch counts once its future resolved.
    A failed batch (the system was down past the retry deadline) is dropped, not retried."""
    serial = 0
    async with client.producer(STREAM) as producer:
        while True:
            ids = [f"m{serial + i}" for i in range(BATCH)]
            serial += BATCH
            with contextlib.suppress(tamto_sdk.TamtoError):
                sent = await producer.send_batch([i.encode() for i in ids], ids=ids)
                await sent
                acked.update(ids)


def published_since(
    acked: set[str], before: int, publisher: asyncio.Task[None]
) -> Callable[[], bool]:
    """True once a few batches more than `before` are acked (or the publisher stopped)."""
    return lambda: len(acked) >= before + 4 * BATCH or publisher.done()


async def stop(publisher: asyncio.Task[None]) -> None:
    """Stop publishing now: the system is gone, and the producer's close must not wait
    out its retry deadline flushing into it (what it sends is not counted anyway)."""
    while not publisher.done():
        publisher.cancel()
        await asyncio.wait([publisher], timeout=0.5)
    with contextlib.suppress(asyncio.CancelledError):
        await publisher


def kill_all(cluster: TestCluster) -> None:
    for name in reversed(SERVICES):
        if name in cluster.processes:
            cluster.kill9(name)


@pytest.mark.timeout(3600 if long_tests_enabled() else 600)
async def test_acked_messages_and_the_credential_survive_power_cuts_of_the_whole_system(
    tamto_infra: Infra, tmp_path: Path
) -> None:
    rng = random.Random(19)
    disk = PowerLossDisk(tmp_path / "backing", tmp_path / "cluster", seed=19)
    acked: set[str] = set()
    with contextlib.ExitStack() as cleanup:
        disk.mount()
        cleanup.callback(disk.close)
        cluster = TestCluster(disk.mountpoint, tamto_infra)
        cleanup.callback(kill_all, cluster)
        cluster.start_all()
        options = tamto_sdk.ClientOptions(retry_deadline_s=60.0)
        async with tamto_sdk.connect(
            cluster.url, api_key=cluster.credential, options=options
        ) as client:
            await client.streams.ensure(STREAM, partitions=2)
            for cut in range(CUTS):
                before = len(acked)
                publisher = asyncio.create_task(publish_until_cancelled(client, acked))
                await eventually(
                    published_since(acked, before, publisher),
                    60,
                    "acknowledged publishing before the cut",
                )
                await asyncio.sleep(rng.uniform(0, 0.5))
                disk.power_off()
                await asyncio.sleep(rng.uniform(0, 0.05))
                kill_all(cluster)
                await stop(publisher)
                report = disk.cut()
                print(f"cut {cut + 1}/{CUTS}: {len(acked)} acked; disk: {report}")
                disk.mount()
                assert load_dev_credential(disk.mountpoint) == cluster.credential
                cluster.start_all()

            got: list[str] = []
            async with client.consumer(STREAM, "after-the-cuts") as consumer:
                while batch := await consumer.receive_batch(max_messages=1000, timeout_s=3):
                    got.extend(m.payload.decode() for m in batch)
                    consumer.ack(batch)
        missing = acked - set(got)
        assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
        assert len(acked) >= CUTS * 4 * BATCH
