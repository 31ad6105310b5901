"""Nack, term and dead letters: a poison message never stalls its subscription.

Run against a running system: TAMTO_URL=... TAMTO_API_KEY=... python examples/dead_letters.py
"""

from __future__ import annotations

import asyncio
import os
import uuid

import tamto_sdk


async def main() -> None:
    url, key = os.environ["TAMTO_URL"], os.environ["TAMTO_API_KEY"]
    stream = f"example-dlq-{uuid.uuid4().hex[:8]}"
    async with tamto_sdk.connect(url, api_key=key) as client:
        # After 2 deliveries a nacked message goes to "<stream>.dlq".
        config = tamto_sdk.StreamConfig(max_deliveries=2)
        await client.streams.ensure(stream, partitions=1, config=config)
        async with client.producer(stream) as producer:
            for payload in (b"ok-1", b"flaky", b"corrupt", b"ok-2"):
                await producer.send_and_wait(payload)

        async with client.consumer(stream, "worker") as consumer:
            handled, nacks = 0, 0
            while handled < 2 or nacks < 2:  # "flaky" is nacked on both its deliveries
                for message in await consumer.receive_batch(max_messages=10, timeout_s=10):
                    if message.payload == b"corrupt":
                        consumer.term(message, "cannot parse")  # to the DLQ now, never again
                    elif message.payload == b"flaky":
                        consumer.nack(message)  # try again; after max_deliveries: DLQ
                        nacks += 1
                        print(f"nacked flaky (delivery {message.delivery_count})")
                    else:
                        consumer.ack(message)
                        handled += 1
                        print(f"handled {message.payload.decode()}")
            await consumer.flush_acks(timeout_s=10)

            reasons: dict[bytes, str] = {}
            dlq = f"{stream}.dlq"
            while len(reasons) < 2:  # the dead-letter stream appears with its first message
                try:
                    async with client.consumer(dlq, "inspect") as dead:
                        while len(reasons) < 2:
                            for message in await dead.receive_batch(max_messages=10, timeout_s=10):
                                reasons[message.payload] = message.headers["tamto.dlq.reason"]
                                dead.ack(message)
                except tamto_sdk.errors.NotFound:
                    await asyncio.sleep(0.2)
        for payload, reason in sorted(reasons.items()):
            print(f"dead letter {payload.decode()}: {reason}")
        assert reasons == {b"corrupt": "term: cannot parse", b"flaky": "max_deliveries"}
        await client.streams.delete(stream)
        await client.streams.delete(dlq)
    print("ok")


if __name__ == "__main__":
    asyncio.run(main())
