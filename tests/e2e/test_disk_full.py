"""A full disk under the whole system: an SDK producer publishing with ids
gets RESOURCE_EXHAUSTED naming the storage node and the path once storage's small filesystem
fills up, nothing it did not get acked for is lost or invented, and publishing resumes by
itself once the filesystem grows, without restarting anything. Every acked message is then
read back by a fresh subscription, once."""

from __future__ import annotations

from pathlib import Path

import pytest

import tamto_sdk
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.small_disk import resize_tmpfs, small_disk
from tamto_testing.waiting import eventually

pytestmark = pytest.mark.e2e

STREAM = "full"
PAD = b"x" * 16_000


def payload(i: int) -> bytes:
    return f"m{i}:".encode() + PAD


async def test_a_full_disk_refuses_publishes_and_publishing_resumes_by_itself(
    tamto_infra: Infra, tmp_path: Path
) -> None:
    cluster = TestCluster(tmp_path / "cluster", tamto_infra)
    options = tamto_sdk.ClientOptions(retry_deadline_s=1.0)
    with small_disk(cluster.workdir / "storage", "4m") as data, cluster.running():
        async with tamto_sdk.connect(
            cluster.url, api_key=cluster.credential, options=options
        ) as client:
            await client.streams.ensure(STREAM, partitions=1)
            acked: list[int] = []
            async with client.producer(STREAM) as producer:
                with pytest.raises(tamto_sdk.errors.ResourceExhausted) as refused:  # noqa: PT012
                    for i in range(2_000):
                        await producer.send_and_wait(payload(i), id=f"m{i}")
                        acked.append(i)
            message = str(refused.value)
            assert cluster.instance_id("storage") in message, message
            assert str(data) in message, message
            assert acked, "the disk filled before anything was acked"

            resize_tmpfs(data, "64m")
            following = len(acked)

            async def resumed() -> bool:
                try:
                    async with client.producer(STREAM) as producer:
                        await producer.send_and_wait(payload(following), id=f"m{following}")
                except (tamto_sdk.errors.ResourceExhausted, tamto_sdk.errors.Unavailable):
                    return False
                return True

            await eventually(resumed, 30, "publishing to resume once space returned")
            acked.append(following)

            got: list[bytes] = []
            async with client.consumer(STREAM, "check") as consumer:
                while batch := await consumer.receive_batch(max_messages=100, timeout_s=1.5):
                    got.extend(m.payload for m in batch)
                    consumer.ack(batch)
            # The refused message may be stored (its id was seen by none) or not: never twice,
            # and every acked one is there.
            stored = [p.split(b":", 1)[0].decode() for p in got]
            assert len(stored) == len(set(stored)), "a message stored twice"
            missing = {f"m{i}" for i in acked} - set(stored)
            assert not missing, f"acked but lost: {sorted(missing)[:5]}"
