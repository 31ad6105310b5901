"""Subscription administration, stream stats and peek end to end:
lag numbers that match what was published and acked, skip, seek (to a time, an
offset, from a live consumer), delete, and the statuses bad input gets."""

from __future__ import annotations

import uuid
from collections.abc import Container

import pytest

import tamto_sdk
from tamto_sdk import Start
from tamto_sdk.security import Grant, Permission
from tamto_testing.cluster import TestCluster
from tamto_testing.waiting import eventually

pytestmark = pytest.mark.e2e


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def publish(client: tamto_sdk.Client, stream: str, payloads: list[bytes]) -> None:
    async with client.producer(stream) as producer:
        for payload in payloads:  # one batch each: each has a publish time of its own
            await producer.send_and_wait(payload)


async def receive(consumer: tamto_sdk.Consumer, count: int) -> list[tamto_sdk.Message]:
    got: list[tamto_sdk.Message] = []
    while len(got) < count:
        batch = await consumer.receive_batch(max_messages=count - len(got), timeout_s=30)
        assert batch, f"only {len(got)} of {count} messages came"
        got.extend(batch)
    return got


async def receive_acking(
    consumer: tamto_sdk.Consumer, count: int, acked: Container[int]
) -> list[tamto_sdk.Message]:
    """Receive `count` messages, ack the ones at the positions in `acked` and flush."""
    got = await receive(consumer, count)
    for i, message in enumerate(got):
        if i in acked:
            consumer.ack(message)
    await consumer.flush_acks(timeout_s=10)
    return got


async def test_describe_shows_lag_that_matches_what_was_published_and_acked(
    tamto_client: tamto_sdk.Client,
) -> None:
    stream = unique("lag")
    await tamto_client.streams.ensure(stream, partitions=1)
    await publish(tamto_client, stream, [f"m{i}".encode() for i in range(10)])

    async with tamto_client.consumer(stream, "billing", consumer_name="worker-1") as consumer:
        got = await receive_acking(consumer, 10, range(4))

        async def acks_applied() -> bool:
            info = await tamto_client.subscriptions.describe(stream, "billing")
            return info.partitions[0].ack_floor == 4

        await eventually(acks_applied, 30, "the four acks to reach the router")
        info = await tamto_client.subscriptions.describe(stream, "billing")
        (part,) = info.partitions
        assert (part.start_offset, part.ack_floor, part.end_offset) == (0, 4, 10)
        assert part.position == 10
        assert part.backlog_messages == 6
        assert info.backlog_messages == 6
        assert part.backlog_bytes > 0
        assert part.unacked == 6
        assert part.type is tamto_sdk.SubscriptionType.EXCLUSIVE
        (attached,) = part.consumers
        assert attached.name == "worker-1"
        assert "127.0.0.1" in attached.address
        assert attached.unacked == 6
        assert part.oldest_unacked_publish_time == got[4].publish_time
        assert part.oldest_unacked_age_s is not None
        assert part.oldest_unacked_age_s >= 0
        assert part.redeliveries == 0
        assert part.dead_lettered == 0

    # Gone: its messages are no longer in flight, but still in the backlog.
    info = await tamto_client.subscriptions.describe(stream, "billing")
    (part,) = info.partitions
    assert (part.ack_floor, part.backlog_messages, part.unacked, part.consumers) == (4, 6, 0, ())
    assert await tamto_client.subscriptions.list(stream) == ["billing"]

    # Skip two, then everything: the backlog shrinks by exactly that.
    skipped = await tamto_client.subscriptions.skip(stream, "billing", 2)
    assert (skipped.partitions[0].ack_floor, skipped.backlog_messages) == (6, 4)
    cleared = await tamto_client.subscriptions.skip(stream, "billing")
    assert (cleared.partitions[0].ack_floor, cleared.backlog_messages) == (10, 0)

    # Back to offset 7: exactly messages 7-9 come again.
    moved = await tamto_client.subscriptions.seek(stream, "billing", {0: 7})
    assert moved.backlog_messages == 3
    async with tamto_client.consumer(stream, "billing") as consumer:
        again = await receive(consumer, 3)
        assert [m.offset for m in again] == [7, 8, 9]
        assert [m.payload for m in again] == [b"m7", b"m8", b"m9"]

    assert await tamto_client.subscriptions.delete(stream, "billing") is True
    with pytest.raises(tamto_sdk.errors.NotFound, match="'billing'"):
        await tamto_client.subscriptions.describe(stream, "billing")
    assert await tamto_client.subscriptions.list(stream) == []


async def test_a_live_consumer_seeking_to_a_time_gets_exactly_what_was_published_after_it(
    tamto_client: tamto_sdk.Client,
) -> None:
    stream = unique("seek-time")
    await tamto_client.streams.ensure(stream, partitions=1)
    before = [f"before-{i}".encode() for i in range(3)]
    after = [f"after-{i}".encode() for i in range(4)]
    await publish(tamto_client, stream, before)
    await publish(tamto_client, stream, after)

    async with tamto_client.consumer(stream, "replay") as consumer:
        got = await receive(consumer, 7)
        for message in got:
            consumer.ack(message)
        moment = got[3].publish_time  # the first "after" message's
        assert got[2].publish_time < moment
        await consumer.seek(Start.time(moment))
        replayed = await receive(consumer, 4)
        assert [m.payload for m in replayed] == after
        assert [m.offset for m in replayed] == [3, 4, 5, 6]
        for message in replayed:
            consumer.ack(message)
        await consumer.flush_acks(timeout_s=10)
        assert len(await consumer.receive_batch(max_messages=10, timeout_s=1)) == 0

        # A skip only acks: the attached consumer is not disconnected (a seek is).
        reconnects = consumer.reconnects
        await publish(tamto_client, stream, [b"late-0", b"late-1"])
        skipped = await tamto_client.subscriptions.skip(stream, "replay")
        assert (skipped.backlog_messages, skipped.partitions[0].ack_floor) == (0, 9)
        assert consumer.reconnects == reconnects


async def test_stream_stats_and_peek(tamto_client: tamto_sdk.Client) -> None:
    stream = unique("stats")
    await tamto_client.streams.ensure(stream, partitions=2)
    await publish(tamto_client, stream, [f"p{i}".encode() for i in range(6)])
    stats = await tamto_client.streams.stats(stream)
    assert [p.partition for p in stats.partitions] == [0, 1]
    assert stats.messages == 6
    for p in stats.partitions:
        assert p.messages == p.end_offset - p.start_offset
        assert p.owner
        if p.messages:
            assert p.bytes_on_disk > 0
            assert p.publish_rate > 0
    busy = next(p for p in stats.partitions if p.messages >= 2)

    batches = await tamto_client.streams.get(stream, busy.partition, 1, count=2)
    messages = [m for batch in batches for m in batch]
    assert [m.offset for m in messages] == [1, 2]
    assert all(m.partition == busy.partition for m in messages)
    with pytest.raises(tamto_sdk.errors.InvalidArgument, match=rf"\[0, {busy.end_offset - 1}\]"):
        await tamto_client.streams.get(stream, busy.partition, busy.end_offset + 5)


async def test_bad_input_gets_a_precise_status(
    tamto_client: tamto_sdk.Client, tamto_cluster: TestCluster
) -> None:
    stream = unique("bad")
    await tamto_client.streams.ensure(stream, partitions=1)
    await publish(tamto_client, stream, [b"a", b"b", b"c"])
    with pytest.raises(tamto_sdk.errors.NotFound, match=f"'{stream}-nope'"):
        await tamto_client.subscriptions.list(f"{stream}-nope")
    with pytest.raises(tamto_sdk.errors.NotFound, match="'ghost'"):
        await tamto_client.subscriptions.describe(stream, "ghost")
    with pytest.raises(tamto_sdk.errors.NotFound, match="'ghost'"):
        await tamto_client.subscriptions.seek(stream, "ghost", Start.earliest())

    async with tamto_client.consumer(
        stream, "pool", subscription_type=tamto_sdk.SubscriptionType.SHARED
    ) as shared:
        await receive(shared, 3)
        with pytest.raises(tamto_sdk.errors.InvalidArgument, match=r"valid range \[0, 3\]"):
            await tamto_client.subscriptions.seek(stream, "pool", {0: 99})
        with pytest.raises(
            tamto_sdk.errors.FailedPrecondition, match="shared consumer cannot seek"
        ):
            await shared.seek(Start.earliest())
        with pytest.raises(tamto_sdk.errors.FailedPrecondition, match="consumers attached"):
            await tamto_client.subscriptions.delete(stream, "pool")

    # A caller with only `publish` on the stream: consume for describe, admin for delete.
    identity, role = unique("pub-only"), unique("pub-only-role")
    await tamto_client.security.create_identity(identity)
    key = await tamto_client.security.create_api_key(identity)
    await tamto_client.security.put_role(role, [Grant(Permission.PUBLISH, stream)])
    await tamto_client.security.bind(identity, role)
    async with tamto_sdk.connect(tamto_cluster.url, api_key=key.api_key) as publisher:

        async def may_publish() -> bool:
            try:
                await publish(publisher, stream, [b"d"])
            except tamto_sdk.errors.PermissionDenied:
                return False
            return True

        await eventually(may_publish, 30, "the publish-only binding to take effect")
        with pytest.raises(tamto_sdk.errors.PermissionDenied, match="lacks permission consume"):
            await publisher.subscriptions.describe(stream, "pool")
        with pytest.raises(tamto_sdk.errors.PermissionDenied, match="lacks permission admin"):
            await publisher.subscriptions.delete(stream, "pool")


async def test_a_multicast_consumer_seeks_only_its_own_cursor(
    tamto_client: tamto_sdk.Client,
) -> None:
    stream = unique("seek-multicast")
    await tamto_client.streams.ensure(stream, partitions=1)
    await publish(tamto_client, stream, [b"a", b"b", b"c"])
    multicast = tamto_sdk.SubscriptionType.MULTICAST
    async with (
        tamto_client.consumer(
            stream, "fan", subscription_type=multicast, consumer_name="one"
        ) as one,
        tamto_client.consumer(
            stream, "fan", subscription_type=multicast, consumer_name="two"
        ) as two,
    ):
        for consumer in (one, two):
            await receive_acking(consumer, 3, range(3))
        await one.seek(Start.offset(1))
        assert [m.payload for m in await receive(one, 2)] == [b"b", b"c"]
        assert len(await two.receive_batch(max_messages=10, timeout_s=1)) == 0
    assert await tamto_client.subscriptions.list(stream) == ["fan~one", "fan~two"]
