"""Recovery within a second: after a service killed with -9 is serving
again, a long-lived SDK producer and consumer resume within 1 s (asserted with
TAMTO_LONG_TESTS=1; CI asserts 5 s, see RESUME_S).

Before, gRPC's own reconnect backoff (1 s growing to 120 s) and the SDK's
backoff (up to 2 s) left clients failing for seconds after the gateway was back.
"""

from __future__ import annotations

import asyncio
import time

import pytest

import tamto_sdk
from tamto_testing.cluster import TestCluster
from tamto_testing.waiting import long_tests_enabled

pytestmark = pytest.mark.e2e

#: The recovery bound: every client resumes within this long of its peer serving again.
PROMISED_S = 1.0
#: What a run asserts: the promise with TAMTO_LONG_TESTS=1; 5 s in CI, since the time
#: includes a restarted router's claim and reopening of the partition and the consumer's
#: next subscribe, on a loaded 2-core machine (measured 0.02-0.25 s for the producer,
#: and once 1.10 s for the consumer after the router's restart, at load 3.5). The SDK's
#: side of the promise (reconnecting within 1 s of a gateway serving again, not after
#: gRPC's default backoff) stays asserted at 1 s in CI by libs/sdk/tests/test_sdk_recovery.py,
#: against a fake gateway with no cluster to wait for.
RESUME_S = PROMISED_S if long_tests_enabled() else 5.0


@pytest.mark.parametrize("victim", ["gateway", "router", "storage"])
async def test_clients_resume_within_a_second_of_a_killed_service_serving_again(
    fresh_cluster: TestCluster, victim: str
) -> None:
    acked_at: list[float] = []
    received_at: list[float] = []
    stop = asyncio.Event()
    async with tamto_sdk.connect(fresh_cluster.url, api_key=fresh_cluster.credential) as client:
        await client.streams.ensure("live", partitions=1)

        async def produce() -> None:
            async with client.producer("live", linger_s=0) as producer:
                seq = 0
                while not stop.is_set():
                    seq += 1
                    await producer.send_and_wait(f"m{seq}".encode(), id=f"m{seq}")
                    acked_at.append(time.monotonic())
                    await asyncio.sleep(0.01)

        async def consume() -> None:
            async with client.consumer("live", "watch") as consumer:
                while not stop.is_set():
                    batch = await consumer.receive_batch(max_messages=100, timeout_s=0.2)
                    if len(batch):
                        received_at.append(time.monotonic())
                        consumer.ack(batch)

        tasks = [asyncio.create_task(produce()), asyncio.create_task(consume())]
        try:
            while len(acked_at) < 20 or not received_at:
                await asyncio.wait(tasks, timeout=0.05)
                assert not any(t.done() for t in tasks), [t.exception() for t in tasks]
            await asyncio.to_thread(fresh_cluster.kill9, victim)
            killed = time.monotonic()
            await asyncio.to_thread(fresh_cluster.start, victim)
            serving = time.monotonic()  # the health check just answered SERVING
            deadline = serving + 10
            while time.monotonic() < deadline and not (
                any(t > serving for t in acked_at) and any(t > serving for t in received_at)
            ):
                await asyncio.wait(tasks, timeout=0.05)
                assert not any(t.done() for t in tasks), [t.exception() for t in tasks]
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)

    first_ack = min((t for t in acked_at if t > serving), default=float("inf"))
    first_delivery = min((t for t in received_at if t > serving), default=float("inf"))
    down = serving - killed
    print(  # shown with pytest -s
        f"{victim}: producer resumed {first_ack - serving:.3f} s, consumer "
        f"{first_delivery - serving:.3f} s after it served again (down {down:.1f} s)"
    )
    assert first_ack - serving < RESUME_S, (
        f"producer resumed {first_ack - serving:.2f} s after {victim} served again (down {down:.1f} s)"
    )
    assert first_delivery - serving < RESUME_S, (
        f"consumer resumed {first_delivery - serving:.2f} s after {victim} served again"
    )
