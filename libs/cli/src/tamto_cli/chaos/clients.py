"""The campaign's clients: producers that publish with ids, a consumer that acks,
and what they saw as it happened; then the read-back of the whole stream.

Split from `tamto_cli.chaos.campaign` (which runs a campaign) so that the
workload and its record stand apart from the faults (`tamto_cli.chaos.faults`)
and from the system's start and stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import tamto_sdk
from tamto_cli.chaos.checker import Fault
from tamto_cli.chaos.options import RECOVERY_LIMIT_S, ChaosOptions

STREAM = "chaos"


@dataclass
class Record:
    """What the clients saw, as it happened (monotonic seconds)."""

    progress: dict[str, list[float]] = field(default_factory=dict)
    acked: set[str] = field(default_factory=set)
    delivered: Counter[str] = field(default_factory=Counter)
    send_failures: int = 0
    faults: list[Fault] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.changed = asyncio.Event()

    def moved(self, client: str) -> None:
        self.progress.setdefault(client, []).append(time.monotonic())
        self.changed.set()

    async def until(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until `condition` holds after some client moved (False after `timeout_s`)."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), remaining)
        return True

    def all_moved_since(self, moment: float) -> bool:
        return all(m and m[-1] > moment for m in self.progress.values())


async def wait_all_moved(record: Record, since: float, tasks: list[asyncio.Task[None]]) -> bool:
    """Wait until every client progressed after `since` (False after `RECOVERY_LIMIT_S`)."""
    deadline = time.monotonic() + RECOVERY_LIMIT_S
    while not record.all_moved_since(since):
        if time.monotonic() > deadline:
            return False
        for task in tasks:
            if task.done():
                task.result()  # a client died: raise its error
        await asyncio.sleep(0.01)
    return True


async def produce(
    client: tamto_sdk.Client,
    name: str,
    options: ChaosOptions,
    record: Record,
    stop: asyncio.Event,
) -> None:
    """Publish ids `<name>-<n>` in awaited chunks at `options.rate`; record every ack."""
    interval = options.chunk / options.rate
    seq = 0
    async with client.producer(STREAM, linger_s=0.002) as producer:
        next_at = time.monotonic()
        while not stop.is_set():
            ids = [f"{name}-{seq + k}" for k in range(options.chunk)]
            seq += options.chunk
            futures = [await producer.send(i.encode(), id=i) for i in ids]
            results = await asyncio.gather(*futures, return_exceptions=True)
            for message_id, result in zip(ids, results, strict=True):
                if isinstance(result, BaseException):
                    record.send_failures += 1
                else:
                    record.acked.add(message_id)
            if any(not isinstance(r, BaseException) for r in results):
                record.moved(name)
            next_at = max(next_at + interval, time.monotonic() - interval)
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))


async def consume(client: tamto_sdk.Client, record: Record) -> None:
    """Receive and ack on one subscription until cancelled; record every delivery. A
    consumer that gives up (its retry deadline spent) is noted, which fails the
    campaign, and replaced, so the campaign still measures the rest."""
    while True:
        try:
            async with client.consumer(STREAM, "chaos-live", credits=2000) as consumer:
                while True:
                    batch = await consumer.receive_batch(max_messages=1000, timeout_s=0.1)
                    if len(batch):
                        ids = batch.record_batch.column("id").to_pylist()
                        record.delivered.update(i for i in ids if i is not None)
                        consumer.ack(batch)
                        record.moved("consumer")
        except tamto_sdk.TamtoError as exc:
            record.notes.append(f"the consumer gave up: {exc!r}")


async def read_back(client: tamto_sdk.Client, expected: int) -> dict[tuple[int, int], str]:
    """The id stored at each (partition, offset) of the stream."""
    stored: dict[tuple[int, int], str] = {}
    sub = f"chaos-check-{random.getrandbits(32):08x}"
    async with client.consumer(STREAM, sub, credits=10_000) as consumer:
        idle_until = time.monotonic() + 10.0
        while time.monotonic() < idle_until:
            batch = await consumer.receive_batch(max_messages=5000, timeout_s=0.5)
            if not len(batch):
                if len(stored) >= expected:
                    idle_until = min(idle_until, time.monotonic() + 1.0)
                continue
            ids = batch.record_batch.column("id").to_pylist()
            for offset, message_id in zip(batch.offset_list(), ids, strict=True):
                stored[(batch.partition, offset)] = message_id
            consumer.ack(batch)
            idle_until = time.monotonic() + 10.0
    return stored
