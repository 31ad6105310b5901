"""`tamto bench`'s processing function rows: a function moving messages stream to stream.

Each function reads a prefilled input (`messages` messages of the run's size: JSON
padded to it, on the run's partitions) with one instance per partition and writes to
an output stream of as many partitions, deployed through the admin API once the input
is full. It is timed from its first result to its last, by the output stream's stats
(so the instances' start is not counted), and its rate is the messages moved in that
time: read, processed, published durably and acked, end to end.

Three functions over the same input: a declarative filter+project (parse two fields,
filter on one, project both: the `functions` target row), a declarative pass-through
(`filter: true`), and a Python batch function returning its input's payloads. A
Python batch function's overhead per batch is how much longer it takes than the
pass-through per batch of the runner's size (`BATCH`): the cost of handing a batch
to Python and taking its result back, beyond the columnar path.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import tamto_sdk

#: Messages each function moves (the input is filled once and read by each in turn).
MESSAGES = 200_000
QUICK_MESSAGES = 20_000
#: The processing runner's batch (`tamto_processing.runner.BATCH_MESSAGES`).
BATCH = 2_000
#: The longest one function may take to move every message.
LIMIT_S = 120.0
POLL_S = 0.05

FILTER_PROJECT: dict[str, Any] = {
    "steps": [
        {"parse_json": {"fields": {"amount": "int", "region": "string"}}},
        {"filter": "amount >= 0"},
        {"project": ["amount", "region"]},
    ]
}
PASS_THROUGH: dict[str, Any] = {"steps": [{"filter": "true"}]}
PYTHON_BATCH: dict[str, Any] = {
    "python": {
        "entry": "bench_identity:run",
        "source": (
            "import pyarrow as pa\n\n\ndef run(batch):\n"
            "    return pa.table({'payload': batch.column('payload'),"
            " 'offset': batch.column('offset')})\n"
        ),
    }
}


def payloads(count: int, size: int) -> list[bytes]:
    """`count` JSON orders, each padded to `size` bytes (at least its fields)."""
    out: list[bytes] = []
    for i in range(count):
        body = json.dumps({"amount": i, "region": "eu", "pad": ""})
        out.append(
            body.replace('"pad": ""', '"pad": "' + "x" * max(0, size - len(body)) + '"').encode()
        )
    return out


async def _messages(admin: tamto_sdk.Client, stream: str) -> int:
    return sum(p.messages for p in (await admin.streams.stats(stream)).partitions)


async def fill(
    admin: tamto_sdk.Client, stream: str, partitions: int, count: int, size: int
) -> None:
    await admin.streams.ensure(stream, partitions=partitions)
    data = payloads(count, size)
    async with admin.producer(stream) as producer:
        for start in range(0, count, 10_000):
            await (await producer.send_batch(data[start : start + 10_000]))


async def moved_rate(
    admin: tamto_sdk.Client,
    name: str,
    source: str,
    code: dict[str, Any],
    partitions: int,
    count: int,
) -> float:
    """Messages per second `code` moves from `source` to a new stream, first to last result."""
    output = f"{name}-out"
    await admin.streams.ensure(output, partitions=partitions)
    identity = (await admin.security.whoami()).subject
    spec = {
        "name": name,
        "inputs": [{"stream": source}],
        "output": output,
        "identity": identity,
        "parallelism": partitions,
        "code": code,
    }
    await admin.functions.deploy(spec)
    try:
        deadline = time.monotonic() + LIMIT_S
        first: tuple[float, int] | None = None
        while (moved := await _messages(admin, output)) < count:
            now = time.monotonic()
            if first is None and moved:
                first = (now, moved)
            if now > deadline:
                raise TimeoutError(f"{name} moved {moved} of {count} in {LIMIT_S:.0f} s")
            await asyncio.sleep(POLL_S)
        start, already = first if first is not None else (time.monotonic() - POLL_S, 0)
        return (count - already) / max(time.monotonic() - start, POLL_S)
    finally:
        await admin.functions.delete(name)
        await admin.streams.delete(output)


async def function_rows(
    admin: tamto_sdk.Client, prefix: str, size: int, partitions: int, quick: bool
) -> dict[str, float]:
    """The `functions` system's numbers at `size`."""
    count = QUICK_MESSAGES if quick else MESSAGES
    source = f"{prefix}-in-{size}"
    await fill(admin, source, partitions, count, size)
    try:
        rates = {
            key: await moved_rate(admin, f"{prefix}-{key}-{size}", source, code, partitions, count)
            for key, code in (
                ("filter_project", FILTER_PROJECT),
                ("pass_through", PASS_THROUGH),
                ("python_batch", PYTHON_BATCH),
            )
        }
    finally:
        await admin.streams.delete(source)
    overhead_ms = (1 / rates["python_batch"] - 1 / rates["pass_through"]) * BATCH * 1000
    return {
        "filter_project_msgs_s": rates["filter_project"],
        "pass_through_msgs_s": rates["pass_through"],
        "python_batch_msgs_s": rates["python_batch"],
        "python_batch_overhead_ms": overhead_ms,
        "messages": count,
    }
