"""Traffic helpers the e2e tests share: consuming a stream through the SDK."""

from __future__ import annotations

import tamto_sdk
from tamto_testing.cluster import TestCluster


async def consume_all(cluster: TestCluster, stream: str, sub: str, n: int) -> list[bytes]:
    """The payloads of `n` messages of `stream`, received and acked through `sub`."""
    got: list[bytes] = []
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        async with client.consumer(stream, sub) as consumer:
            while len(got) < n:
                batch = await consumer.receive_batch(max_messages=n, timeout_s=15)
                assert len(batch) > 0, f"only {len(got)} of {n} messages delivered"
                got.extend(m.payload for m in batch)
                consumer.ack(batch)
    return got
