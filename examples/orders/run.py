"""The order pipeline, end to end, in one command against `tamto up`.

    .venv/bin/python examples/orders/run.py

Creates the run's streams, deploys the three functions (`pipeline.py`), publishes raw
orders (some invalid, some unparseable, some test traffic), waits until every result
is in, runs the Spark report over the streams' Parquet (`report.py`, chart in
`--out`), checks what came out, deletes the functions and prints ``ok``. The URL and
API key come from TAMTO_URL and TAMTO_API_KEY, or `tamto up`'s defaults in `.tamto`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline import REGIONS, Streams, enrich_spec, revenue_spec, validate_spec

import tamto_sdk

CUSTOMERS = [f"customer-{i:02d}" for i in range(20)]
WAIT_S = 180.0


@dataclass
class Published:
    """What the run sent, by what should become of it."""

    valid: int = 0
    rejected: int = 0
    unparseable: int = 0
    test: int = 0


def orders(count: int, seed: int) -> tuple[list[tuple[bytes, bytes]], Published]:
    """`count` raw orders as (key, payload): most valid, the rest bad in each way."""
    rng = random.Random(seed)
    sent = Published()
    seq = dict.fromkeys(CUSTOMERS, 0)
    rows: list[tuple[bytes, bytes]] = []
    for n in range(count):
        customer = rng.choice(CUSTOMERS)
        seq[customer] += 1
        amount = round(rng.uniform(5, 500), 2)
        order: dict[str, object] = {
            "order_id": f"o-{n}",
            "customer": customer,
            "region": rng.choice(REGIONS),
            "channel": rng.choice(("web", "app")),
            "amount": amount,
            "seq": seq[customer],
        }
        roll = rng.random()
        if n % 200 == 199:
            payload = b'{"order_id": "o-%d", "amount": ' % n  # cut off: not JSON
            sent.unparseable += 1
        else:
            if roll < 0.03:
                order["channel"] = "test"
                sent.test += 1
            elif roll < 0.07:
                order["amount"] = -amount
                sent.rejected += 1
            elif roll < 0.09:
                order["region"] = "mars"
                sent.rejected += 1
            else:
                sent.valid += 1
            payload = json.dumps(order).encode()
        rows.append((customer.encode(), payload))
    return rows, sent


async def wait_for(what: str, check: Callable[[], Awaitable[bool]]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {WAIT_S:.0f} s for {what}")
        await asyncio.sleep(0.5)


async def messages(client: tamto_sdk.Client, stream: str) -> int:
    try:
        stats = await client.streams.stats(stream)
    except tamto_sdk.errors.NotFound:
        return 0
    return sum(p.messages for p in stats.partitions)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=2000)
    parser.add_argument("--window-s", type=int, default=60, help="revenue window (per minute)")
    parser.add_argument("--lateness-s", type=int, default=5)
    parser.add_argument("--prefix", default=f"orders-{uuid.uuid4().hex[:6]}")
    parser.add_argument("--identity", default="dev", help="the identity functions run as")
    parser.add_argument("--out", default="examples/orders/out", help="where the chart goes")
    parser.add_argument("--storage-dir", default=os.environ.get("TAMTO_STORAGE_DIR"))
    parser.add_argument("--keep", action="store_true", help="leave the functions deployed")
    return parser.parse_args(argv)


def credentials() -> tuple[str, str]:
    url = os.environ.get("TAMTO_URL", "tamto://127.0.0.1:7400")
    key = os.environ.get("TAMTO_API_KEY") or Path(".tamto/dev-credential").read_text().strip()
    return url, key


async def deploy(client: tamto_sdk.Client, streams: Streams, args: argparse.Namespace) -> None:
    for stream, partitions in streams.partitions().items():
        await client.streams.ensure(stream, partitions=partitions)
    for spec in (
        validate_spec(streams, args.identity),
        enrich_spec(streams, args.identity),
        revenue_spec(streams, args.identity, args.window_s, args.lateness_s),
    ):
        info = await client.functions.deploy(spec)
        print(f"deployed {info.name} (version {info.version}) as {info.identity}")


async def publish(client: tamto_sdk.Client, streams: Streams, count: int) -> Published:
    rows, sent = orders(count, seed=7)
    async with client.producer(streams.raw) as producer:
        for key, payload in rows:  # keyed by customer: each customer's orders in order
            await producer.send(payload, key=key)
        await producer.flush()
    print(
        f"published {count} raw orders: {sent.valid} valid, {sent.rejected} invalid, "
        f"{sent.unparseable} unparseable, {sent.test} test traffic"
    )
    return sent


async def await_results(client: tamto_sdk.Client, streams: Streams, sent: Published) -> None:
    expected = {
        streams.valid: sent.valid,
        streams.rejected: sent.rejected,
        streams.dead_letters: sent.unparseable,
        streams.enriched: sent.valid,
    }
    for stream, count in expected.items():

        async def arrived(stream: str = stream, count: int = count) -> bool:
            return await messages(client, stream) >= count

        await wait_for(f"{count} messages in {stream}", arrived)
        print(f"{stream}: {await messages(client, stream)} messages (expected {count})")
    counted = 0
    async with client.consumer(streams.revenue, f"check-{uuid.uuid4().hex[:6]}") as windows:

        async def closed() -> bool:
            nonlocal counted
            batch = await windows.receive_batch(1000, timeout_s=0.5)
            counted += sum(int(json.loads(m.payload)["orders"]) for m in batch)
            return counted >= sent.valid

        await wait_for("every order in a closed revenue window", closed)
    print(f"{streams.revenue}: windows closed over {counted} orders")


async def show_status(client: tamto_sdk.Client, streams: Streams) -> None:
    for name in ("validate", "enrich", "revenue"):
        status = await client.functions.status(f"{streams.prefix}-{name}")
        print(
            f"{status.function.name}: processed {status.processed}, "
            f"dead-lettered {status.errors}, backlog {status.backlog_messages}"
        )
        for instance in status.instances:
            if instance.restarts or (instance.last_error and not instance.errors):
                print(f"  {instance.instance}: {instance.restarts} restarts: {instance.last_error}")


async def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    url, key = credentials()
    streams = Streams(args.prefix)
    storage_dir = args.storage_dir or ".tamto/storage"
    async with await tamto_sdk.connect(url, api_key=key) as client:
        await deploy(client, streams, args)
        sent = await publish(client, streams, args.orders)
        try:
            await await_results(client, streams, sent)
        finally:
            await show_status(client, streams)
        from report import spark_report  # Spark starts only once the results are in

        await asyncio.to_thread(
            spark_report, streams, storage_dir, args.window_s, Path(args.out), sent.valid
        )
        if not args.keep:
            for name in ("validate", "enrich", "revenue"):
                await client.functions.delete(f"{streams.prefix}-{name}")
    print("ok")


if __name__ == "__main__":
    asyncio.run(main())
