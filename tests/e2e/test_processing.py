"""Processing functions end to end: real gateway, router, storage, auth and a processing node.

Functions are deployed by writing their spec and credential where the admin API keeps
them (`tamto_functions.specs.SpecStore`), as the processing nodes read them.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aetcd
import pytest
from tamto_functions.model import Declarative, FunctionSpec, Input, PythonCode
from tamto_functions.specs import SpecStore
from tamto_processing.runner import ERROR_HEADER

import tamto_sdk
from tamto_sdk.security import Grant, IdentityKind, Permission
from tamto_testing.cluster import TestCluster
from tamto_testing.waiting import eventually
from tests.processing_nodes import FAST, processing_node

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def processing(tamto_cluster: TestCluster) -> Iterator[TestCluster]:
    with processing_node(tamto_cluster) as cluster:
        yield cluster


@pytest.fixture
def specs(etcd_client: aetcd.Client) -> SpecStore:
    return SpecStore(etcd_client)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def read_all(client: tamto_sdk.Client, stream: str, expected: int) -> list[Any]:
    """Every message of `stream` once `expected` are there (waits up to 60 s)."""
    seen: list[Any] = []
    async with client.consumer(stream, unique("check")) as consumer:

        async def enough() -> bool:
            batch = await consumer.receive_batch(1000, timeout_s=0.5)
            seen.extend(batch)
            return len(seen) >= expected

        await eventually(enough, 60, f"{expected} messages in {stream}")
        extra = await consumer.receive_batch(1000, timeout_s=1.0)
        seen.extend(extra)
    return seen


async def test_a_declarative_function_filters_keys_and_dead_letters_bad_input(
    processing: TestCluster, tamto_client: tamto_sdk.Client, specs: SpecStore
) -> None:
    source, output, name = unique("orders"), unique("valid"), unique("fn")
    await tamto_client.streams.ensure(source, partitions=2)
    await tamto_client.streams.ensure(output, partitions=2)
    steps = (
        {"parse_json": {"fields": {"amount": "float", "customer": "string"}}},
        {"filter": "amount > 0"},
        {"set_key": "customer"},
        {"project": ["customer", "amount"]},
    )
    spec = FunctionSpec(name, (Input(source),), output, Declarative(steps), identity="dev")
    await specs.put(spec, processing.credential)
    payloads = [
        json.dumps({"amount": i - 10, "customer": f"c{i % 7}"}).encode() for i in range(100)
    ]
    payloads[50] = b"{broken"
    async with tamto_client.producer(source) as producer:
        await (await producer.send_batch(payloads))

    valid = await read_all(tamto_client, output, 88)  # amounts 1..89 but the broken one
    assert len(valid) == 88
    assert sorted(json.loads(m.payload)["amount"] for m in valid) == [
        float(i - 10) for i in range(11, 100) if i != 50
    ]
    assert {m.key for m in valid} == {f"c{i}".encode() for i in range(7)}
    (dead,) = await read_all(tamto_client, spec.dead_letters, 1)
    assert dead.payload == b"{broken"
    assert (
        "json" in dead.headers[ERROR_HEADER].lower()
        or "decode" in dead.headers[ERROR_HEADER].lower()
    )
    await specs.delete(name)


async def test_kill9_mid_stream_every_result_appears_exactly_once(
    processing: TestCluster, tamto_client: tamto_sdk.Client, specs: SpecStore
) -> None:
    source, output, name = unique("in"), unique("out"), unique("fn")
    await tamto_client.streams.ensure(source, partitions=3)
    # Several output partitions: a batch redone after the kill must land where it did.
    await tamto_client.streams.ensure(output, partitions=3)
    code = PythonCode(
        "upper:run", "def run(payload):\n    return payload.upper()\n", per_message=True
    )
    await specs.put(
        FunctionSpec(name, (Input(source),), output, code, identity="dev"), processing.credential
    )
    total = 6000
    async with tamto_client.producer(source) as producer:
        await (await producer.send_batch([f"m{i}".encode() for i in range(total // 2)]))

        async with tamto_client.consumer(output, unique("probe")) as probe:

            async def some_processed() -> bool:
                return len(await probe.receive_batch(10, timeout_s=0.2)) > 0

            await eventually(some_processed, 60, "the first results")
        processing.kill9("processing")
        await (await producer.send_batch([f"m{i}".encode() for i in range(total // 2, total)]))
    processing.start("processing", extra_env=FAST)

    results = await read_all(tamto_client, output, total)
    payloads = [m.payload for m in results]
    assert len(payloads) == total, f"{len(payloads) - len(set(payloads))} duplicates"
    assert set(payloads) == {f"M{i}".encode() for i in range(total)}
    await specs.delete(name)


async def test_a_batch_30_percent_bad_dead_letters_each_bad_once_in_bounded_calls(
    processing: TestCluster, tamto_client: tamto_sdk.Client, specs: SpecStore, tmp_path: Path
) -> None:
    """Many bad messages in one batch: each good one published once, each bad one
    dead-lettered once, and the code ran about once per message, not ~2n times (halving)."""
    source, output, name = unique("in"), unique("out"), unique("fn")
    await tamto_client.streams.ensure(source, partitions=1)
    await tamto_client.streams.ensure(output, partitions=2)
    calls = tmp_path / "calls"
    source_code = (
        "import pyarrow as pa\n\n\ndef run(batch):\n"
        f"    with open({str(calls)!r}, 'a') as f:\n"
        "        f.write('.')\n"
        "    payloads = batch.column('payload').to_pylist()\n"
        "    if any(p.startswith(b'bad') for p in payloads):\n"
        "        raise ValueError('a bad order')\n"
        "    return pa.table({'payload': batch.column('payload'),"
        " 'offset': batch.column('offset')})\n"
    )
    code = PythonCode("checker:run", source_code)
    await specs.put(
        FunctionSpec(name, (Input(source),), output, code, identity="dev"), processing.credential
    )
    n = 200
    payloads = [(b"bad" if i % 10 in (2, 5, 8) else b"ok") + str(i).encode() for i in range(n)]
    async with tamto_client.producer(source) as producer:
        await (await producer.send_batch(payloads))  # one stored batch, one delivery

    good = await read_all(tamto_client, output, 140)
    dead = await read_all(tamto_client, name + ".dlq", 60)
    assert sorted(m.payload for m in good) == sorted(p for p in payloads if p.startswith(b"ok"))
    assert sorted(m.payload for m in dead) == sorted(p for p in payloads if p.startswith(b"bad"))
    assert {m.headers[ERROR_HEADER] for m in dead} == {"ValueError: a bad order"}
    made = len(calls.read_text())
    assert made <= n + n // 8 + 8, f"{made} calls of the function for {n} messages"
    await specs.delete(name)


async def test_a_function_whose_identity_may_not_publish_fails_and_publishes_nothing(
    processing: TestCluster, tamto_client: tamto_sdk.Client, specs: SpecStore
) -> None:
    source, output, name, who = unique("in"), unique("out"), unique("fn"), unique("reader")
    await tamto_client.streams.ensure(source, partitions=1)
    await tamto_client.streams.ensure(output, partitions=1)
    security = tamto_client.security
    await security.create_identity(who, IdentityKind.SERVICE)
    await security.put_role(who, [Grant(Permission.CONSUME, source)])
    await security.bind(who, who)
    key = (await security.create_api_key(who)).api_key
    code = Declarative(({"filter": "true"},))
    await specs.put(FunctionSpec(name, (Input(source),), output, code, identity=who), key)
    async with tamto_client.producer(source) as producer:
        await producer.send_and_wait(b"x")

    async def refused() -> bool:
        statuses = await specs.statuses(name)
        return any("PermissionDenied" in s.get("last_error", "") for s in statuses.values())

    await eventually(refused, 60, "the instance's status to say PermissionDenied")
    stats = await tamto_client.streams.stats(output)
    assert sum(p.end_offset for p in stats.partitions) == 0
    await specs.delete(name)


async def test_a_dead_nodes_instances_start_on_another_node_within_seconds(
    processing: TestCluster, tamto_client: tamto_sdk.Client, specs: SpecStore
) -> None:
    """Two processing nodes share a function's instances by the ring; kill -9 of one
    moves its instances to the other once its lease lapses, and results keep coming."""
    source, output, name = unique("in"), unique("out"), unique("fn")
    await tamto_client.streams.ensure(source, partitions=4)
    await tamto_client.streams.ensure(output, partitions=1)
    code = Declarative(({"filter": "true"},))
    spec = FunctionSpec(name, (Input(source),), output, code, identity="dev", parallelism=8)
    processing.start("processing-2", extra_env=FAST)
    try:
        await specs.put(spec, processing.credential)
        nodes = {processing.instance_id(n) for n in ("processing", "processing-2")}

        async def on(wanted: set[str]) -> bool:
            statuses = await specs.statuses(name)
            return len(statuses) == 8 and {s["node"] for s in statuses.values()} == wanted

        await eventually(lambda: on(nodes), 60, "the 8 instances spread over both nodes")
        processing.kill9("processing-2")
        killed = time.monotonic()
        survivor = {processing.instance_id("processing")}

        async def all_on_survivor() -> bool:
            statuses = await specs.statuses(name)
            running = [s for s in statuses.values() if s["node"] in survivor]
            return len(running) == 8 and all(s["updated_at"] > killed for s in running)

        await eventually(all_on_survivor, 60, "every instance on the surviving node")
        moved_after_s = time.monotonic() - killed
        async with tamto_client.producer(source) as producer:
            await (await producer.send_batch([f"m{i}".encode() for i in range(200)]))
        results = await read_all(tamto_client, output, 200)
        assert len(results) == 200
        print(f"instances moved {moved_after_s:.1f} s after the kill")
        assert moved_after_s < 30  # the lease TTL (5 s) and a look (0.2 s), on a busy machine
    finally:
        await specs.delete(name)
        with contextlib.suppress(Exception):
            processing.stop("processing-2")
