"""Micro-benchmark of the SDK's per-message consuming path alone, in one process and
without a server: what `async for message in consumer: consumer.ack(message)` costs
per message once the batches have arrived (250,000 msg/s needs <= 4 us).

Batches of 100-byte messages are put straight into a `Consumer`'s receive buffer
(never started, so nothing is sent); the loop reads `payload` of each message and
acks it. Also times plain iteration of a `MessageBatch` (`for m in batch`).

    .venv/bin/python libs/sdk/tests/sdk_iteration_bench.py [messages] [batch size]

Not a test (no ``test_`` prefix): it measures, it asserts nothing.
"""

from __future__ import annotations

import asyncio
import sys
import time
from types import SimpleNamespace
from typing import cast

import pyarrow as pa

from tamto_protocol.batch import BATCH_SCHEMA
from tamto_sdk import ClientOptions
from tamto_sdk._calls import Calls
from tamto_sdk.consumer import Consumer
from tamto_sdk.messages import MessageBatch, us_to_datetime


def make_batch(first_offset: int, count: int, size: int = 100) -> MessageBatch:
    """`count` messages of `size` bytes, no key, headers, id or event time."""
    arrays = [
        pa.array([b"x" * size] * count, f.type) if f.name == "payload" else pa.nulls(count, f.type)
        for f in BATCH_SCHEMA
    ]
    return MessageBatch(
        stream="bench",
        partition=0,
        first_offset=first_offset,
        publish_time=us_to_datetime(1_700_000_000_000_000),
        record_batch=pa.RecordBatch.from_arrays(arrays, schema=BATCH_SCHEMA),
    )


async def consume_and_ack(total: int, batch_size: int) -> float:
    """Seconds per message of ``async for`` + `ack` over `total` messages."""
    calls = cast(Calls, SimpleNamespace(options=ClientOptions()))
    consumer = Consumer(calls, "bench", "sub", credits=10 * batch_size)
    batches = [make_batch(i, batch_size) for i in range(0, total, batch_size)]
    consumer._buffer.extend(batches)
    consumer._data.set()
    count = 0
    started = time.perf_counter()
    async for message in consumer:
        consumer.ack(message)
        count += len(message.payload) and 1
        if count == len(batches) * batch_size:
            break
    return (time.perf_counter() - started) / count


def iterate(total: int, batch_size: int) -> float:
    """Seconds per message of ``for message in batch`` reading `payload`."""
    batches = [make_batch(i, batch_size) for i in range(0, total, batch_size)]
    count = 0
    started = time.perf_counter()
    for batch in batches:
        for message in batch:
            count += len(message.payload) and 1
    return (time.perf_counter() - started) / count


def main() -> None:
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 500_000
    batch_size = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    per_message = asyncio.run(consume_and_ack(total, batch_size))
    per_iterated = iterate(total, batch_size)
    print(f"async for + ack: {per_message * 1e6:.2f} us/msg ({1 / per_message:,.0f} msg/s)")
    print(f"for m in batch:  {per_iterated * 1e6:.2f} us/msg ({1 / per_iterated:,.0f} msg/s)")


if __name__ == "__main__":
    main()
