"""Each subscription type, side by side: who gets which message.

Run against a running system: TAMTO_URL=... TAMTO_API_KEY=... python examples/subscription_types.py
"""

from __future__ import annotations

import asyncio
import os
import uuid

import tamto_sdk
from tamto_sdk import SubscriptionType

KEYS = [b"alice", b"bob", b"carol", b"dave"]


async def drain(consumer: tamto_sdk.Consumer) -> list[tamto_sdk.Message]:
    """Everything the consumer gets until it has been quiet for a second, acked."""
    got: list[tamto_sdk.Message] = []
    while batch := await consumer.receive_batch(max_messages=100, timeout_s=1.0):
        got.extend(batch)
        consumer.ack(batch)
    return got


async def main() -> None:
    url, key = os.environ["TAMTO_URL"], os.environ["TAMTO_API_KEY"]
    stream = f"example-types-{uuid.uuid4().hex[:8]}"
    async with tamto_sdk.connect(url, api_key=key) as client:
        await client.streams.ensure(stream, partitions=1)
        async with client.producer(stream) as producer:
            for i in range(40):
                await producer.send(f"m{i}".encode(), key=KEYS[i % len(KEYS)])

        for kind in SubscriptionType:
            names = ["a"] if kind is SubscriptionType.EXCLUSIVE else ["a", "b"]
            consumers = [
                client.consumer(
                    stream, f"sub-{kind.value}", subscription_type=kind, consumer_name=name
                )
                for name in names
            ]
            for consumer in consumers:
                await consumer.start()
            got = await asyncio.gather(*(drain(c) for c in consumers))
            for consumer in consumers:
                await consumer.close()
            counts = [len(g) for g in got]
            print(f"{kind.value:>10}: messages per consumer {counts}")
            if kind is SubscriptionType.MULTICAST:
                assert counts == [40, 40], "multicast: every consumer gets every message"
            elif kind is SubscriptionType.FAILOVER:
                assert sorted(counts) == [0, 40], "failover: one active consumer"
            else:
                assert sum(counts) == 40, f"{kind.value}: each message once"
            if kind is SubscriptionType.KEY_SHARED:
                owners = [{m.key for m in g} for g in got]
                assert not owners[0] & owners[1], "key-shared: a key goes to one consumer"
        await client.streams.delete(stream)
    print("ok")


if __name__ == "__main__":
    asyncio.run(main())
