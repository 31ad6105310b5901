"""Replay: a new subscription from a point in time, or from an offset; and an
existing subscription moved back (seek) after it read everything.

Run against a running system: TAMTO_URL=... TAMTO_API_KEY=... python examples/replay.py
"""

from __future__ import annotations

import asyncio
import os
import uuid
from datetime import UTC, datetime

import tamto_sdk
from tamto_sdk import Start


async def read_all(
    client: tamto_sdk.Client, stream: str, name: str, start: tamto_sdk.StartPosition
) -> list[bytes]:
    async with client.consumer(stream, name, start=start) as consumer:
        got: list[bytes] = []
        while batch := await consumer.receive_batch(max_messages=100, timeout_s=2.0):
            got.extend(m.payload for m in batch)
            consumer.ack(batch)
        return got


async def main() -> None:
    url, key = os.environ["TAMTO_URL"], os.environ["TAMTO_API_KEY"]
    stream = f"example-replay-{uuid.uuid4().hex[:8]}"
    async with tamto_sdk.connect(url, api_key=key) as client:
        await client.streams.ensure(stream, partitions=1)
        async with client.producer(stream) as producer:
            for i in range(3):
                await producer.send_and_wait(f"before-{i}".encode())
            await asyncio.sleep(0.05)  # publish times are in µs: a clear gap to cut at
            cut = datetime.now(UTC)
            for i in range(3):
                await producer.send_and_wait(f"after-{i}".encode())

        since = await read_all(client, stream, "replay-from-time", Start.time(cut))
        print(f"from {cut.isoformat()}: {since}")
        assert since == [b"after-0", b"after-1", b"after-2"]
        from_offset = await read_all(client, stream, "replay-from-offset", Start.offset(2))
        print(f"from offset 2: {from_offset}")
        assert from_offset == [b"before-2", b"after-0", b"after-1", b"after-2"]

        # The subscription read and acked everything: no backlog. Seek it back to the
        # start (consumers attached would reconnect there) and the lag is all six.
        info = await client.subscriptions.describe(stream, "replay-from-offset")
        print(f"backlog after reading: {info.backlog_messages}")
        assert info.backlog_messages == 0
        info = await client.subscriptions.seek(stream, "replay-from-offset", Start.earliest())
        print(f"backlog after seeking to the start: {info.backlog_messages}")
        assert info.backlog_messages == 6
        again = await read_all(client, stream, "replay-from-offset", Start.latest())
        assert again == [*(f"before-{i}".encode() for i in range(3)), *since]
        await client.streams.delete(stream)
    print("ok")


if __name__ == "__main__":
    asyncio.run(main())
