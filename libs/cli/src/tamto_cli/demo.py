"""The `tamto up --demo` walk-through: publish and consume through the SDK."""

from __future__ import annotations

import time

from rich.console import Console
from rich.table import Table

import tamto_sdk
from tamto_sdk import Start

DEMO_STREAM = "demo"
DEMO_SUBSCRIPTION = "demo-reader"
DEMO_MESSAGES = 1_000


async def run_demo(
    url: str, api_key: str, console: Console, root_certificates: bytes | None = None
) -> None:
    console.rule("demo")
    options = tamto_sdk.ClientOptions(root_certificates=root_certificates)
    async with tamto_sdk.connect(url, api_key=api_key, options=options) as client:
        ensured = await client.streams.ensure(DEMO_STREAM, partitions=3)
        state = "created" if ensured.created else "exists"
        console.print(
            f"stream [bold]{DEMO_STREAM}[/] ({state}, {ensured.stream.partitions} partitions)"
        )

        started = time.perf_counter()
        async with client.producer(DEMO_STREAM) as producer:
            futures = [
                await producer.send(f"order {i}".encode(), key=f"customer-{i % 10}".encode())
                for i in range(DEMO_MESSAGES)
            ]
            results = [await f for f in futures]
        elapsed = time.perf_counter() - started
        per_partition: dict[int, list[int]] = {}
        for r in results:
            per_partition.setdefault(r.partition, []).append(r.offset)
        table = Table(title=f"published {len(results)} messages in {elapsed:.2f}s (durable)")
        table.add_column("partition")
        table.add_column("messages")
        table.add_column("offsets")
        for p, offsets in sorted(per_partition.items()):
            table.add_row(str(p), str(len(offsets)), f"{min(offsets)}-{max(offsets)}")
        console.print(table)

        consumed = 0
        keys: set[bytes] = set()
        async with client.consumer(
            DEMO_STREAM, DEMO_SUBSCRIPTION, start=Start.earliest()
        ) as consumer:
            while True:
                batch = await consumer.receive_batch(max_messages=500, timeout_s=2.0)
                if len(batch) == 0:
                    break
                for message in batch:
                    if message.key is not None:
                        keys.add(message.key)
                consumed += len(batch)
                consumer.ack(batch)
        console.print(
            f"consumed and acked [bold]{consumed}[/] messages with subscription "
            f"[bold]{DEMO_SUBSCRIPTION}[/] ({len(keys)} distinct keys). A second run consumes "
            "only what was published since: the subscription's cursor is durable."
        )
    console.rule()
