"""The operator verbs' second pass, end to end through the SDK and the CLI: a seek
is all or none, `unacked` counts messages, the one-call overview, seek dry runs
and relative moves, peek by subscription, and errors with their own exit code,
no router address, and the consumer that blocks a delete named."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import tamto_sdk
from tamto_protocol.partitioning import partition_for_key
from tamto_sdk import Start
from tamto_testing.cluster import TestCluster
from tamto_testing.waiting import eventually

from .test_cli_pub_sub import tamto
from .test_subscription_admin import publish, receive, receive_acking

pytestmark = pytest.mark.e2e


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def cli(cluster: TestCluster, *args: str) -> subprocess.CompletedProcess[str]:
    """`tamto ARGS` in a thread: consumers in this process keep being served meanwhile."""
    return await asyncio.to_thread(tamto, cluster, *args)


async def cli_json(cluster: TestCluster, *args: str) -> Any:
    done = await cli(cluster, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def keys_for(counts: list[int]) -> list[bytes]:
    """Keys that put counts[p] messages on partition p."""
    keys: list[bytes] = []
    wanted = list(counts)
    i = 0
    while any(wanted):
        key = f"k{i}".encode()
        p = partition_for_key(key, len(counts))
        if wanted[p]:
            keys.append(key)
            wanted[p] -= 1
        i += 1
    return keys


async def one_partition_stream(
    client: tamto_sdk.Client, prefix: str, payloads: list[bytes], *, one_batch: bool = False
) -> str:
    """A new one-partition stream holding `payloads`, published one at a time (or in
    `one_batch`); its name."""
    stream = unique(prefix)
    await client.streams.ensure(stream, partitions=1)
    if one_batch:
        async with client.producer(stream) as producer:
            await (await producer.send_batch(payloads))
    else:
        await publish(client, stream, payloads)
    return stream


def numbered(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(count)]


async def floors(client: tamto_sdk.Client, stream: str, sub: str) -> dict[int, int]:
    info = await client.subscriptions.describe(stream, sub)
    return {p.partition: p.ack_floor for p in info.partitions}


async def acked_to(client: tamto_sdk.Client, stream: str, sub: str, want: dict[int, int]) -> None:
    async def there() -> bool:
        return await floors(client, stream, sub) == want

    await eventually(there, 30, f"{sub}'s cursors at {want}")


async def test_a_refused_seek_moves_no_partition(
    tamto_client: tamto_sdk.Client, tamto_cluster: TestCluster
) -> None:
    stream = unique("atomic")
    await tamto_client.streams.ensure(stream, partitions=3)
    keys = keys_for([5, 3, 8])  # partition ends 5, 3, 8
    async with tamto_client.producer(stream) as producer:
        await (await producer.send_batch([b"m"] * len(keys), keys=keys))
    async with tamto_client.consumer(stream, "ops") as consumer:
        for message in await receive(consumer, len(keys)):
            if message.offset == 0:
                consumer.ack(message)
        await consumer.flush_acks(timeout_s=10)
    await acked_to(tamto_client, stream, "ops", {0: 1, 1: 1, 2: 1})

    # Offset 8 is partition 2's end but beyond partitions 0 and 1's: nothing moves.
    with pytest.raises(tamto_sdk.errors.OutOfRange, match=r"valid range \[0, [35]\]"):
        await tamto_client.subscriptions.seek(stream, "ops", Start.offset(8))
    assert await floors(tamto_client, stream, "ops") == {0: 1, 1: 1, 2: 1}
    refused = await cli(
        tamto_cluster, "sub", "seek", stream, "ops", "--offset", "0=2", "--offset", "1=9"
    )
    assert refused.returncode == 9, refused.stderr  # OUT_OF_RANGE
    assert await floors(tamto_client, stream, "ops") == {0: 1, 1: 1, 2: 1}

    # Valid everywhere: every partition moves.
    moved = await cli_json(tamto_cluster, "sub", "seek", stream, "ops", "--to", "offset:3")
    assert [p["ack_floor"] for p in moved["partitions"]] == [3, 3, 3]


async def test_unacked_counts_messages_not_delivered_batches(
    tamto_client: tamto_sdk.Client, tamto_cluster: TestCluster
) -> None:
    stream = await one_partition_stream(tamto_client, "unacked", numbered("m", 10), one_batch=True)
    async with tamto_client.consumer(stream, "work", consumer_name="w1") as consumer:
        await receive_acking(consumer, 10, range(4))  # one delivery: one run in flight
        await acked_to(tamto_client, stream, "work", {0: 4})

        info = await tamto_client.subscriptions.describe(stream, "work")
        (part,) = info.partitions
        assert (part.unacked, part.backlog_messages, part.consumers[0].unacked) == (6, 6, 6)
        described = await cli_json(tamto_cluster, "sub", "describe", stream, "work")
        assert described["unacked"] == 6
        assert described["partitions"][0]["consumers"][0]["unacked"] == 6


async def test_the_overview_has_a_row_per_subscription(
    tamto_client: tamto_sdk.Client, tamto_cluster: TestCluster
) -> None:
    stream = await one_partition_stream(tamto_client, "overview", numbered("m", 6))
    async with tamto_client.consumer(stream, "idle") as idle:
        await receive_acking(idle, 6, {0})
    async with tamto_client.consumer(stream, "live", consumer_name="reader") as live:
        await receive_acking(live, 6, range(2))
        await acked_to(tamto_client, stream, "live", {0: 2})

        rows = {r.subscription: r for r in await tamto_client.subscriptions.overview(stream)}
        assert set(rows) == {"idle", "live"}
        busy, quiet = rows["live"], rows["idle"]
        assert (busy.stream, busy.partitions, busy.backlog_messages, busy.unacked) == (
            stream,
            1,
            4,
            4,
        )
        assert busy.consumers == ("reader",)
        assert busy.type is tamto_sdk.SubscriptionType.EXCLUSIVE
        assert busy.oldest_unacked_age_s is not None
        assert busy.publish_rate > 0
        assert (quiet.backlog_messages, quiet.unacked, quiet.consumers, quiet.type) == (
            5,
            0,
            (),
            None,
        )
        assert quiet.dead_lettered == 0
        everywhere = await tamto_client.subscriptions.overview()
        assert {(r.stream, r.subscription) for r in everywhere} >= {
            (stream, "idle"),
            (stream, "live"),
        }

        listed = await cli_json(tamto_cluster, "sub", "overview", stream)
        by_name = {r["subscription"]: r for r in listed}
        assert (by_name["live"]["backlog_messages"], by_name["live"]["unacked"]) == (4, 4)
        assert by_name["live"]["consumers"] == ["reader"]
        assert by_name["live"]["type"] == "exclusive"
        assert by_name["idle"]["oldest_unacked_age_s"] > 0
        table = await cli(tamto_cluster, "sub", "overview")
        assert table.returncode == 0, table.stderr
        assert "reader" in table.stdout
        assert "idle" in table.stdout


async def test_seek_dry_runs_and_relative_moves(
    tamto_client: tamto_sdk.Client, tamto_cluster: TestCluster
) -> None:
    stream = await one_partition_stream(tamto_client, "dry", numbered("before-", 3))
    async with tamto_client.consumer(stream, "replay") as consumer:
        before = await receive_acking(consumer, 3, range(3))
        last_before = before[-1].publish_time
        await eventually(
            lambda: datetime.now(UTC) > last_before + timedelta(seconds=1), 5, "a second to pass"
        )
        await publish(tamto_client, stream, numbered("after-", 3))
        got = await receive_acking(consumer, 3, range(3))
    await acked_to(tamto_client, stream, "replay", {0: 6})
    first_after = got[0].publish_time

    # Dry runs: where the cursor would go; it stays.
    plan = await tamto_client.subscriptions.seek(stream, "replay", Start.offset(1), dry_run=True)
    assert (plan.partitions[0].ack_floor, plan.partitions[0].seek_to) == (6, 1)
    ago = datetime.now(UTC) - (first_after - timedelta(seconds=0.5))
    plan = await tamto_client.subscriptions.seek(stream, "replay", ago, dry_run=True)
    assert plan.partitions[0].seek_to == 3
    shifted = await tamto_client.subscriptions.shift(stream, "replay", -2, dry_run=True)
    assert shifted.partitions[0].seek_to == 4
    since = await cli_json(
        tamto_cluster, "sub", "seek", stream, "replay", "--since", "10m", "--dry-run"
    )
    assert since["dry_run"] is True
    assert (since["partitions"][0]["ack_floor"], since["partitions"][0]["seek_to"]) == (6, 0)
    back = await cli_json(
        tamto_cluster, "sub", "seek", stream, "replay", "--shift-by", "-2", "--dry-run"
    )
    assert back["partitions"][0]["seek_to"] == 4
    shown = await cli(
        tamto_cluster, "sub", "seek", stream, "replay", "--shift-by", "-2", "--dry-run"
    )
    assert shown.returncode == 0, shown.stderr
    assert "dry run" in shown.stdout
    assert "-2" in shown.stdout
    assert await floors(tamto_client, stream, "replay") == {0: 6}

    # The real moves: to that long ago replays exactly the later messages.
    ago = datetime.now(UTC) - (first_after - timedelta(seconds=0.5))
    await tamto_client.subscriptions.seek(stream, "replay", ago)
    async with tamto_client.consumer(stream, "replay") as consumer:
        assert [m.payload for m in await receive(consumer, 3)] == [
            b"after-0",
            b"after-1",
            b"after-2",
        ]
    moved = await cli_json(tamto_cluster, "sub", "seek", stream, "replay", "--shift-by", "-1")
    assert moved["partitions"][0]["ack_floor"] == 2
    clamped = await tamto_client.subscriptions.shift(stream, "replay", -100)
    assert clamped.partitions[0].ack_floor == 0


async def test_peek_shows_what_a_subscription_gets_next_without_consuming(
    tamto_client: tamto_sdk.Client, tamto_cluster: TestCluster
) -> None:
    stream = await one_partition_stream(tamto_client, "peek", numbered("m", 8), one_batch=True)
    async with tamto_client.consumer(stream, "peeker") as consumer:
        await receive_acking(consumer, 8, {0, 1, 4})
    await acked_to(tamto_client, stream, "peeker", {0: 2})

    batches = await tamto_client.subscriptions.peek(stream, "peeker", 3)
    peeked = [m for batch in batches for m in batch]
    assert [(m.offset, m.payload) for m in peeked] == [(2, b"m2"), (3, b"m3"), (5, b"m5")]
    lines = await cli(tamto_cluster, "sub", "peek", stream, "peeker", "--count", "3", "--json")
    assert lines.returncode == 0, lines.stderr
    assert [json.loads(line)["offset"] for line in lines.stdout.splitlines()] == [2, 3, 5]
    # Nothing was delivered or acked: the next consumer gets them.
    info = await tamto_client.subscriptions.describe(stream, "peeker")
    assert (info.partitions[0].ack_floor, info.backlog_messages) == (2, 5)
    async with tamto_client.consumer(stream, "peeker") as consumer:
        assert [m.offset for m in await receive(consumer, 5)] == [2, 3, 5, 6, 7]


async def test_errors_have_an_exit_code_each_no_router_address_and_name_the_consumer(
    tamto_client: tamto_sdk.Client, tamto_cluster: TestCluster
) -> None:
    stream = await one_partition_stream(tamto_client, "errors", numbered("m", 3))
    routers = [tamto_cluster.address(name) for name in tamto_cluster.routers()]

    async with tamto_client.consumer(stream, "held", consumer_name="worker-7") as consumer:
        await receive(consumer, 3)
        with pytest.raises(tamto_sdk.errors.FailedPrecondition, match="'worker-7'"):
            await tamto_client.subscriptions.delete(stream, "held")
        blocked = await cli(tamto_cluster, "sub", "delete", stream, "held")
        assert blocked.returncode == 8, blocked.stderr  # FAILED_PRECONDITION
        assert "'worker-7'" in blocked.stderr
        # A router's refusal on a consume stream reaches the client in its own words.
        shared = tamto_sdk.SubscriptionType.SHARED
        with pytest.raises(
            tamto_sdk.errors.FailedPrecondition, match="is exclusive"
        ) as refused_type:
            async with tamto_client.consumer(stream, "held", subscription_type=shared) as second:
                await second.receive_batch(max_messages=1, timeout_s=10)
        assert "router" not in str(refused_type.value)
        assert not any(address in str(refused_type.value) for address in routers)

    with pytest.raises(tamto_sdk.errors.OutOfRange) as beyond:
        await tamto_client.subscriptions.seek(stream, "held", {0: 99})
    assert "[0, 3]" in str(beyond.value)
    assert not any(address in str(beyond.value) for address in routers)
    refused = await cli(tamto_cluster, "sub", "seek", stream, "held", "--offset", "0=99")
    assert refused.returncode == 9, refused.stderr  # OUT_OF_RANGE
    assert "[0, 3]" in refused.stderr
    missing = await cli(tamto_cluster, "sub", "describe", stream, "ghost")
    assert missing.returncode == 4, missing.stderr  # NOT_FOUND
    no_stream = await cli(tamto_cluster, "sub", "peek", f"{stream}-nope", "held")
    assert no_stream.returncode == 4, no_stream.stderr
    bad = await cli(
        tamto_cluster, "stream", "get", stream, "-p", "0", "--offset", "0", "--count", "5000"
    )
    assert bad.returncode == 3, bad.stderr  # INVALID_ARGUMENT
    for done in (refused, missing, no_stream, bad):
        assert "router" not in done.stderr
        assert not any(address in done.stderr for address in routers)
    deleted = await cli_json(tamto_cluster, "sub", "delete", stream, "held")
    assert deleted == {"stream": stream, "subscription": "held", "deleted": True}
