"""Ephemeral subscriptions come back after their gateway is lost.

A consumer's gateway is killed with -9 and started again; the consumer (alone or
as a group member) subscribes again by itself and receives within 1 s of the
gateway serving again, as durable consumers do (tests/e2e/test_recovery.py).
What was published while it was away is lost, by design (at most once): what
arrives after is in order and never twice. A gateway that stays away ends the
iteration with the error once the client's retry deadline is spent.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

import tamto_sdk
from tamto_sdk import ClientOptions, EphemeralConfig, EphemeralSubscription
from tamto_sdk.errors import Unavailable
from tamto_testing.cluster import TestCluster
from tamto_testing.waiting import long_tests_enabled

pytestmark = pytest.mark.e2e

#: The bound: a client resumes within this long of its peer serving again.
#: Asserted with TAMTO_LONG_TESTS=1; CI asserts 5 s, since the measurement includes
#: the restarted gateway's first calls and this test's polling on a loaded 2-core
#: machine (a subscription that does not subscribe again never resumes at all).
RESUME_S = 1.0 if long_tests_enabled() else 5.0


async def test_subscriptions_resume_within_a_second_of_their_gateway_serving_again(
    fresh_cluster: TestCluster,
) -> None:
    # The producer publishes through a second gateway, which stays up throughout.
    second = await asyncio.to_thread(fresh_cluster.start_gateway)
    stream = f"eph-{uuid.uuid4().hex[:8]}"
    stop = asyncio.Event()
    arrivals: dict[str, list[tuple[float, int]]] = {"alone": [], "group": []}

    async def read(sub: EphemeralSubscription, into: list[tuple[float, int]]) -> None:
        async for message in sub:
            into.append((time.monotonic(), int(message.payload)))

    async def produce(client: tamto_sdk.Client) -> None:
        async with client.ephemeral_producer(stream) as producer:
            seq = 0
            while not stop.is_set():
                seq += 1
                await producer.send_batch([str(seq).encode()], topic="tick.n")
                await asyncio.sleep(0.01)

    url, key = fresh_cluster.url, fresh_cluster.credential
    async with tamto_sdk.connect(url, api_key=key) as near:
        async with tamto_sdk.connect(second, api_key=key) as far:
            await near.streams.ensure(stream, config=EphemeralConfig())
            alone = await near.subscribe(stream, match="tick.#").start()
            member = await near.subscribe(stream, match="tick.*", group="g").start()
            tasks = [
                asyncio.create_task(read(alone, arrivals["alone"])),
                asyncio.create_task(read(member, arrivals["group"])),
                asyncio.create_task(produce(far)),
            ]

            def running() -> None:
                assert not any(t.done() for t in tasks), [t.exception() for t in tasks]

            try:
                while not all(arrivals.values()):
                    await asyncio.wait(tasks, timeout=0.05)
                    running()
                await asyncio.to_thread(fresh_cluster.kill9, "gateway")
                await asyncio.to_thread(fresh_cluster.start, "gateway")
                serving = time.monotonic()  # the health check just answered SERVING
                deadline = serving + 10
                while time.monotonic() < deadline and not all(
                    any(t > serving for t, _ in got) for got in arrivals.values()
                ):
                    await asyncio.wait(tasks, timeout=0.05)
                    running()
            finally:
                stop.set()
                await alone.close()
                await member.close()
                await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)

            # A gateway that stays away: the iteration raises after retry_deadline_s.
            brief_options = ClientOptions(retry_deadline_s=1.0)
            async with tamto_sdk.connect(url, api_key=key, options=brief_options) as brief:
                stranded = await brief.subscribe(stream).start()
                await asyncio.to_thread(fresh_cluster.kill9, "gateway")
                with pytest.raises(Unavailable):
                    await asyncio.wait_for(stranded.receive_batch(), 30)

    for who, got in arrivals.items():
        first = min((t for t, _ in got if t > serving), default=float("inf"))
        assert first - serving < RESUME_S, (
            f"{who} resumed {first - serving:.2f} s after its gateway served again"
        )
        sequence = [seq for _, seq in got]
        assert sequence == sorted(set(sequence)), f"{who} got messages twice or out of order"
    assert alone.reconnects >= 1
    assert member.reconnects >= 1
