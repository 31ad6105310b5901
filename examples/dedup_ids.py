"""Dedup ids: a message sent twice with the same id is stored once.

Run against a running system: TAMTO_URL=... TAMTO_API_KEY=... python examples/dedup_ids.py
"""

from __future__ import annotations

import asyncio
import os
import uuid

import tamto_sdk


async def main() -> None:
    url, key = os.environ["TAMTO_URL"], os.environ["TAMTO_API_KEY"]
    stream = f"example-dedup-{uuid.uuid4().hex[:8]}"
    async with tamto_sdk.connect(url, api_key=key) as client:
        await client.streams.ensure(stream, partitions=1)
        async with client.producer(stream) as producer:
            # An application-level id (an order number): a retry after a crash is harmless.
            first = await producer.send_and_wait(b"order 1001 paid", id="order-1001")
            again = await producer.send_and_wait(b"order 1001 paid", id="order-1001")
            other = await producer.send_and_wait(b"order 1002 paid", id="order-1002")
        print(f"first at {first.offset}, resent at {again.offset}, next at {other.offset}")
        assert again.offset == first.offset, "the resend got the original offset back"
        assert other.offset == first.offset + 1, "nothing was stored for the resend"
        ids: list[str | None] = []
        async with client.consumer(stream, "audit") as consumer:
            while batch := await consumer.receive_batch(max_messages=10, timeout_s=2.0):
                ids.extend(m.id for m in batch)
                consumer.ack(batch)
        print(f"stored ids: {ids}")
        assert ids == ["order-1001", "order-1002"]
        await client.streams.delete(stream)
    print("ok")


if __name__ == "__main__":
    asyncio.run(main())
