"""Arrow in, Arrow out: publish a pyarrow Table, consume MessageBatches as tables.

Run against a running system: TAMTO_URL=... TAMTO_API_KEY=... python examples/arrow_batches.py
"""

from __future__ import annotations

import asyncio
import os
import uuid

import pyarrow as pa
import pyarrow.compute as pc

import tamto_sdk

ROWS = 10_000


async def main() -> None:
    url, key = os.environ["TAMTO_URL"], os.environ["TAMTO_API_KEY"]
    stream = f"example-arrow-{uuid.uuid4().hex[:8]}"
    async with tamto_sdk.connect(url, api_key=key) as client:
        await client.streams.ensure(stream, partitions=2)
        table = pa.table(
            {
                "payload": pa.array([f"{i}".encode() for i in range(ROWS)], pa.binary()),
                "key": pa.array([f"k{i % 16}".encode() for i in range(ROWS)], pa.binary()),
            }
        )
        async with client.producer(stream) as producer:
            published = await (await producer.send_batch(table))
        print(f"published {len(published)} messages in one call")

        total, seen = 0, 0
        async with client.consumer(stream, "analytics") as consumer:
            while seen < ROWS:
                batch = await consumer.receive_batch(max_messages=5_000, timeout_s=10)
                # Vectorised: the payloads as numbers, summed without a Python loop.
                numbers = pc.cast(pc.cast(batch.table.column("payload"), pa.string()), pa.int64())
                total += pc.sum(numbers).as_py() or 0
                seen += len(batch)
                consumer.ack(batch)
        print(f"consumed {seen} messages, payload sum {total}")
        assert total == sum(range(ROWS))
        await client.streams.delete(stream)
    print("ok")


if __name__ == "__main__":
    asyncio.run(main())
