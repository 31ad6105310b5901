"""Ephemeral streams and request/reply on a real cluster with two gateways.

Producers publish through the cluster's first gateway; most consumers read
through a second one, so every delivery here crossed the bus between gateways.
"""

from __future__ import annotations

import asyncio
import functools
import math
import operator
import os
import re
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator

import pytest

import tamto_sdk
from tamto_gateway.topics import TopicPattern, words
from tamto_sdk import EphemeralConfig, EphemeralSubscription
from tamto_sdk.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NoResponders,
    NotFound,
    Timeout,
)
from tamto_sdk.stream_config import Overflow, StreamKind
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.waiting import eventually
from tests.e2e.members import metrics_of
from tests.topic_cases import BINDINGS, EXPECTED

pytestmark = pytest.mark.e2e


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def two_gateways(
    tamto_infra: Infra, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[TestCluster, str]]:
    """A cluster and the URL of its second gateway."""
    with TestCluster(tmp_path_factory.mktemp("cluster"), tamto_infra).running() as cluster:
        yield cluster, cluster.start_gateway()


@pytest.fixture
async def clients(
    two_gateways: tuple[TestCluster, str],
) -> AsyncIterator[tuple[tamto_sdk.Client, tamto_sdk.Client]]:
    """One client on each gateway."""
    cluster, second = two_gateways
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as one:
        async with tamto_sdk.connect(second, api_key=cluster.credential) as two:
            yield one, two


async def ephemeral(client: tamto_sdk.Client, **config: int | Overflow) -> str:
    name = unique("eph")
    await client.streams.ensure(name, config=EphemeralConfig(**config))  # type: ignore[arg-type]
    return name


async def collect(sub: EphemeralSubscription, into: list[bytes]) -> None:
    async for message in sub:
        into.append(message.payload)


def marker_topic(pattern: str) -> str:
    """A topic `pattern` matches (for a marker message that closes a subscriber's run)."""
    parsed = TopicPattern.parse(pattern)
    for hash_word in (None, "m"):
        parts = [
            "m" if w == "*" else (hash_word if w == "#" else w)
            for w in words(pattern)
            if w != "#" or hash_word is not None
        ]
        topic = ".".join(p for p in parts if p is not None)
        if parsed.matches(topic):
            return topic
    raise AssertionError(f"no marker topic for {pattern!r}")


# -- admin ---------------------------------------------------------------------------------


async def test_ephemeral_streams_through_the_admin_api(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    one, two = clients
    name = unique("eph-admin")
    config = EphemeralConfig(buffer_messages=50, overflow=Overflow.DROP_NEWEST)
    created = await one.streams.ensure(name, config=config)
    assert created.created
    assert created.stream.kind is StreamKind.EPHEMERAL
    assert created.stream.ephemeral == EphemeralConfig(50, Overflow.DROP_NEWEST, 30_000)
    again = await two.streams.ensure(name, kind=StreamKind.EPHEMERAL)
    assert not again.created
    assert again.differences == [
        "buffer_messages: stored 50, requested 10000",
        "overflow: stored 'drop_newest', requested 'drop_oldest'",
    ]
    assert (await two.streams.describe(name)).ephemeral == created.stream.ephemeral
    assert name in {s.name for s in await one.streams.list()}
    assert await one.streams.delete(name)
    with pytest.raises(NotFound):
        await two.streams.describe(name)


async def test_bad_ephemeral_definitions_are_refused_naming_the_field(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    one, _ = clients
    with pytest.raises(InvalidArgument, match="buffer_messages must be between 1 and 1000000"):
        await one.streams.ensure(unique("eph"), config=EphemeralConfig(buffer_messages=2_000_000))
    with pytest.raises(InvalidArgument, match="request_timeout_ms must be between 1 and 600000"):
        await one.streams.ensure(unique("eph"), config=EphemeralConfig(request_timeout_ms=700_000))
    with pytest.raises(InvalidArgument, match="ephemeral stream has 1 partition"):
        await one.streams.ensure(unique("eph"), partitions=3, kind=StreamKind.EPHEMERAL)


# -- topics --------------------------------------------------------------------------------


async def test_topic_matching_conformance_table_across_gateways(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    """Every binding of the table subscribes on gateway 2; every topic is published on
    gateway 1; each subscriber receives exactly the topics the table says, in order.
    A marker message per binding, published last, tells a subscriber it has all."""
    one, two = clients
    stream = await ephemeral(one)
    subs = {name: await two.subscribe(stream, match=p).start() for name, p in BINDINGS.items()}
    got: dict[str, list[bytes]] = {name: [] for name in BINDINGS}
    tasks = [asyncio.create_task(collect(subs[n], got[n])) for n in BINDINGS]
    try:
        async with one.ephemeral_producer(stream) as producer:
            for topic in EXPECTED:
                await producer.send_batch([f"topic:{topic}".encode()], topic=topic)
            for name, pattern in BINDINGS.items():
                await producer.send_batch([f"marker:{name}".encode()], topic=marker_topic(pattern))
        for name in BINDINGS:
            marker = f"marker:{name}".encode()
            await eventually(
                functools.partial(operator.contains, got[name], marker), 20, f"{name}'s marker"
            )
    finally:
        for task in tasks:
            task.cancel()
    for name in BINDINGS:
        mine = f"marker:{name}".encode()
        before_marker = got[name][: got[name].index(mine)]
        topics = [p.decode()[len("topic:") :] for p in before_marker if p.startswith(b"topic:")]
        expected = [t for t, selected in EXPECTED.items() if name in selected]
        assert topics == expected, f"binding {name} ({BINDINGS[name]!r})"


@pytest.mark.parametrize(
    ("match", "problem"),
    [("a.b*", "word 2"), ("a.>", "word 2"), ("x." * 128, "at most 255")],
)
async def test_bad_patterns_are_invalid_argument(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client], match: str, problem: str
) -> None:
    one, _ = clients
    stream = await ephemeral(one)
    with pytest.raises(InvalidArgument, match=rf"match pattern .*{re.escape(problem)}"):
        await one.subscribe(stream, match=match).start()


@pytest.mark.parametrize(
    ("topic", "problem"),
    [("a.b#", "word 2"), ("a b", "word 1"), ("é" * 128, "256 bytes"), ("t" * 256, "at most 255")],
)
async def test_bad_topics_are_invalid_argument(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client], topic: str, problem: str
) -> None:
    one, _ = clients
    stream = await ephemeral(one)
    async with one.ephemeral_producer(stream) as producer:
        with pytest.raises(InvalidArgument, match=rf"topic .*{re.escape(problem)}"):
            await producer.send_batch([b"x"], topic=topic)


async def test_pipelined_publishes_fail_one_by_one(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    """A client's ephemeral publishes share one pipelined stream: ten in flight at
    once, the refused one (a bad topic) fails alone with INVALID_ARGUMENT, and the
    others are answered and delivered."""
    one, _ = clients
    stream = await ephemeral(one)
    received: list[bytes] = []
    async with one.subscribe(stream, match="ok.#") as sub:
        reader = asyncio.create_task(collect(sub, received))
        try:
            async with one.ephemeral_producer(stream) as producer:
                results = await asyncio.gather(
                    *(
                        producer.send_batch([b"%d" % i], topic="bad#" if i == 5 else "ok.x")
                        for i in range(10)
                    ),
                    return_exceptions=True,
                )
            await eventually(lambda: len(received) >= 9, 20, "the nine accepted messages")
        finally:
            reader.cancel()
    assert isinstance(results[5], InvalidArgument), results[5]
    assert "topic" in str(results[5])
    assert [r for i, r in enumerate(results) if i != 5] == [1] * 9
    assert sorted(received) == sorted(b"%d" % i for i in range(10) if i != 5)
    calls = one._calls.publish_ephemeral_raw
    assert calls._next_id > 10  # numbered on the stream, not sent unary
    assert calls._unary_until == -math.inf  # the gateway never answered UNIMPLEMENTED


async def test_persistent_and_ephemeral_apis_do_not_mix(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    one, _ = clients
    stream = await ephemeral(one)
    async with one.producer(stream) as producer:
        with pytest.raises(FailedPrecondition, match="is ephemeral"):
            await producer.send_and_wait(b"x")
    persistent = unique("persistent")
    await one.streams.ensure(persistent)
    with pytest.raises(FailedPrecondition, match="is persistent"):
        await one.subscribe(persistent).start()


# -- entities, groups, buffers -------------------------------------------------------------


async def test_groups_share_and_every_entity_gets_each_message_once(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    """A group of three members over two gateways: each message to exactly one member,
    no member idle. Beside it, a consumer of its own and a second group get everything."""
    one, two = clients
    stream = await ephemeral(one)
    members = [
        await one.subscribe(stream, match="orders.#", group="billing").start(),
        await two.subscribe(stream, match="orders.#", group="billing").start(),
        await two.subscribe(stream, match="orders.#", group="billing").start(),
    ]
    alone = await two.subscribe(stream, match="orders.*").start()
    audit = await one.subscribe(stream, match="#", group="audit").start()
    received: list[list[bytes]] = [[] for _ in range(5)]
    tasks = [
        asyncio.create_task(collect(sub, into))
        for sub, into in zip([*members, alone, audit], received, strict=True)
    ]
    count = 90
    try:
        async with one.ephemeral_producer(stream) as producer:
            for i in range(count):
                # (How many entities gateway 1 counts depends on whether gateway 2's
                # announcement of its consumers has reached it yet: not asserted here.)
                await producer.send_batch([b"%d" % i], topic="orders.eu")
            # Only the audit group, on this gateway, matches: known here at once.
            assert await producer.send_batch([b"other"], topic="payments.eu") == 1
        await eventually(
            lambda: (
                sum(len(r) for r in received[:3]) >= count
                and len(received[3]) >= count
                and len(received[4]) >= count + 1
            ),
            20,
            "every entity got every message",
        )
    finally:
        for task in tasks:
            task.cancel()
    group = [p for r in received[:3] for p in r]
    assert sorted(group) == sorted(b"%d" % i for i in range(count))  # each once
    assert all(received[:3]), [len(r) for r in received[:3]]  # no member idle
    assert received[3] == [b"%d" % i for i in range(count)]
    assert Counter(received[4]) == Counter([*(b"%d" % i for i in range(count)), b"other"])


async def test_unmatched_messages_are_counted_per_stream(
    two_gateways: tuple[TestCluster, str], clients: tuple[tamto_sdk.Client, tamto_sdk.Client]
) -> None:
    cluster, _ = two_gateways
    one, two = clients
    stream = await ephemeral(one)

    async def unmatched_at_gateway_one() -> float:
        page = await metrics_of(cluster, "gateway")
        found = re.search(
            rf'tamto_ephemeral_unmatched_messages_total{{stream="{stream}"}} (\S+)', page
        )
        return float(found.group(1)) if found else 0.0

    async with two.subscribe(stream, match="known.*"):
        async with one.ephemeral_producer(stream) as producer:

            async def seen_by_gateway_one() -> bool:
                return await producer.send_batch([b"probe"], topic="known.x") == 1

            await eventually(seen_by_gateway_one, 10, "gateway 1 learns of the remote consumer")
            # Probes sent before the announcement arrived were unmatched too: count from here.
            before = await unmatched_at_gateway_one()
            assert await producer.send_batch([b"a", b"b", b"c"], topic="unknown.x") == 0

    assert await unmatched_at_gateway_one() == before + 3.0


async def test_fan_out_to_100_consumers_on_two_gateways(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    one, two = clients
    stream = await ephemeral(one)
    subs = [await (one if i % 2 else two).subscribe(stream).start() for i in range(100)]
    received: list[list[bytes]] = [[] for _ in subs]
    tasks = [asyncio.create_task(collect(s, r)) for s, r in zip(subs, received, strict=True)]
    payloads = [b"m%d" % i for i in range(10)]
    try:
        async with one.ephemeral_producer(stream) as producer:
            await producer.send_batch(payloads, topic="fan.out")
        await eventually(lambda: all(len(r) >= 10 for r in received), 20, "100 consumers")
    finally:
        for task in tasks:
            task.cancel()
    assert all(r == payloads for r in received)


async def test_a_member_that_dies_stops_receiving_at_once(
    two_gateways: tuple[TestCluster, str], clients: tuple[tamto_sdk.Client, tamto_sdk.Client]
) -> None:
    """Once a member's connection is gone, every message goes to the live member
    (ten in a row without a gap); what the dead one had is not redelivered."""
    cluster, second = two_gateways
    one, two = clients
    stream = await ephemeral(one)
    doomed = await tamto_sdk.connect(second, api_key=cluster.credential)
    await doomed.subscribe(stream, group="workers").start()
    survivor = await two.subscribe(stream, group="workers").start()
    received: list[bytes] = []
    reader = asyncio.create_task(collect(survivor, received))
    await doomed._channel.close()  # the member "dies": its connection drops

    def ten_in_a_row() -> bool:
        tail = [int(p) for p in received[-10:]]
        return len(tail) == 10 and tail == list(range(tail[0], tail[0] + 10))

    async def publish_until_done() -> None:
        async with one.ephemeral_producer(stream) as producer:
            for i in range(100_000):
                if ten_in_a_row():
                    return
                await producer.send_batch([b"%d" % i])

    writer = asyncio.create_task(publish_until_done())
    try:
        await eventually(ten_in_a_row, 20, "ten messages in a row to the survivor")
        await writer
    finally:
        reader.cancel()
        writer.cancel()
        await doomed.close()
    numbers = [int(p) for p in received]
    assert numbers == sorted(set(numbers))  # in order, nothing twice


async def test_a_slow_consumer_loses_messages_beyond_its_buffer_not_others(
    two_gateways: tuple[TestCluster, str], clients: tuple[tamto_sdk.Client, tamto_sdk.Client]
) -> None:
    """A consumer that does not read: its gateway keeps `buffer_messages`, drops the
    newest beyond and counts them (reported with the next delivery); a consumer of the
    same stream that reads meanwhile is not held back by it."""
    cluster, second = two_gateways
    one, two = clients
    stream = await ephemeral(one, buffer_messages=16, overflow=Overflow.DROP_NEWEST)
    # Without BDP probing the slow client's HTTP/2 window stays small, so its
    # gateway's writes block after a few batches and the buffer fills.
    small_window = tamto_sdk.ClientOptions(channel_options=(("grpc.http2.bdp_probe", 0),))
    slow_client = await tamto_sdk.connect(second, api_key=cluster.credential, options=small_window)
    slow = await slow_client.subscribe(stream).start()
    fast = await two.subscribe(stream).start()
    fast_got: list[bytes] = []
    fast_task = asyncio.create_task(collect(fast, fast_got))
    count, big = 80, b"x" * (256 << 10)
    try:
        async with one.ephemeral_producer(stream) as producer:
            for i in range(count):
                await producer.send_batch([b"%03d" % i + big])
        # The reader may itself fall behind on a loaded machine: what it lost is counted.
        await eventually(
            lambda: len(fast_got) + fast.dropped >= count, 60, "the reader got or lost all"
        )
    finally:
        fast_task.cancel()
    # Both consumers share one bus subscription: the slow one was offered all by now.
    slow_got: list[int] = []
    try:
        while len(slow_got) + slow.dropped < count:
            batch = await asyncio.wait_for(slow.receive_batch(), 30)
            assert batch is not None
            slow_got.extend(int(m.payload[:3]) for m in batch)
    finally:
        await slow_client.close()
    assert slow.dropped > 0
    assert len(slow_got) + slow.dropped == count
    assert slow_got == sorted(slow_got)
    assert slow_got[0] == 0  # drop-newest keeps the oldest
    assert len(fast_got) > len(slow_got)  # the reader was not held to the idle one's pace


# -- request/reply -------------------------------------------------------------------------


async def test_request_reply_across_gateways(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    one, two = clients
    stream = await ephemeral(one)

    def answer(message: tamto_sdk.EphemeralMessage) -> bytes:
        return b"re:" + message.payload + b"@" + message.topic.encode()

    async with two.reply_handler(stream, answer, match="rpc.*") as handler:
        reply = await one.request(stream, b"ping", topic="rpc.echo", timeout_s=10)
        assert reply.payload == b"re:ping@rpc.echo"
        named = await one.request(
            stream, b"two", topic="rpc.echo", timeout_s=10, response_stream=unique("mine")
        )
        assert named.payload == b"re:two@rpc.echo"
        # Generated response streams share one bus subscription per gateway: each
        # reply still reaches its own request.
        payloads = [f"n{i}".encode() for i in range(20)]
        replies = await asyncio.gather(
            *(one.request(stream, p, topic="rpc.many", timeout_s=10) for p in payloads)
        )
        assert [r.payload for r in replies] == [b"re:" + p + b"@rpc.many" for p in payloads]
        # The handler counts a reply once its Reply call returned, which may be
        # after the requester already has it.
        await eventually(lambda: handler.answered == 22, 10, "the handler counted 22 replies")


async def test_pipelined_requests_and_replies_fail_one_by_one(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    """Requests share one pipelined stream per client, replies another: with
    requests in flight together, one with a timeout beyond the limit is refused
    alone (INVALID_ARGUMENT), one nobody consumes fails alone (no responders), one
    that waits for a responder times out alone at the server, and the others get
    their replies."""
    one, two = clients
    stream = await ephemeral(one)
    async with two.reply_handler(stream, lambda m: b"re:" + m.payload, match="rpc.*"):
        results = await asyncio.gather(
            *(one.request(stream, b"%d" % i, topic="rpc.x", timeout_s=10) for i in range(8)),
            one.request(stream, b"long", topic="rpc.x", timeout_s=601),
            one.request(stream, b"nobody", topic="other", timeout_s=5),
            one.request(stream, b"waits", topic="other", timeout_s=0.5, wait_for_responder=True),
            return_exceptions=True,
        )
    *answered, too_long, nobody, unanswered = results
    assert [r.payload for r in answered] == [  # type: ignore[union-attr]
        b"re:%d" % i for i in range(8)
    ]
    assert isinstance(too_long, InvalidArgument), too_long
    assert isinstance(nobody, NoResponders), nobody
    assert isinstance(unanswered, Timeout), unanswered
    for calls in (one._calls.request_raw, two._calls.reply_raw):
        assert calls._next_id > 1  # numbered on the stream, not sent unary
        assert calls._unary_until == -math.inf


async def test_no_reply_times_out_at_the_server(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    one, _ = clients
    stream = await ephemeral(one, request_timeout_ms=400)
    started = time.monotonic()
    with pytest.raises(Timeout, match=r"no reply on response stream .* within 400 ms"):
        await one.request(stream, b"anyone?", wait_for_responder=True)  # the stream's default
    assert 0.35 < time.monotonic() - started < 5
    with pytest.raises(Timeout, match="within 300 ms"):
        await one.request(stream, b"anyone?", timeout_s=0.3, wait_for_responder=True)


async def test_bad_timeouts_are_invalid_argument(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    one, _ = clients
    stream = await ephemeral(one)
    with pytest.raises(InvalidArgument, match="timeout_ms must be between 1 and 600000"):
        await one.request(stream, b"x", timeout_s=601)
    with pytest.raises(InvalidArgument, match="timeout_s must be a positive number"):
        await one.request(stream, b"x", timeout_s=-1)


async def test_a_taken_response_stream_name_is_already_exists(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    one, two = clients
    stream = await ephemeral(one)
    name = unique("answers")
    listener = await two.subscribe(stream).start()  # live before the request goes out
    waiting = asyncio.create_task(one.request(stream, b"first", timeout_s=20, response_stream=name))
    first = await asyncio.wait_for(listener.receive_batch(), 10)  # the first is in flight
    assert first is not None
    assert first.response_stream == name
    with pytest.raises(AlreadyExists, match=f"response stream '{name}' is already in use"):
        await two.request(stream, b"second", timeout_s=1, response_stream=name)
    with pytest.raises(AlreadyExists, match="names a stream"):
        await two.request(stream, b"third", timeout_s=1, response_stream=stream)
    generated_form = f"reply-{uuid.uuid4().hex}"
    with pytest.raises(InvalidArgument, match="has the form of a generated name"):
        await two.request(stream, b"fourth", timeout_s=1, response_stream=generated_form)
    with pytest.raises(FailedPrecondition, match="is a response stream"):
        await two.subscribe(name).start()
    await two.reply(name, b"done")
    assert (await waiting).payload == b"done"


async def test_replies_to_expired_or_unknown_response_streams_are_refused(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    one, two = clients
    stream = await ephemeral(one)
    listener = await two.subscribe(stream).start()
    with pytest.raises(Timeout):
        await one.request(stream, b"late", timeout_s=0.2)
    request = await asyncio.wait_for(listener.receive_batch(), 10)
    assert request is not None
    assert request.response_stream
    with pytest.raises(NotFound, match="does not exist or has expired"):
        await two.reply(request.response_stream, b"too late")
    with pytest.raises(NotFound, match="does not exist or has expired"):
        await two.reply(unique("never-made"), b"?")
    with pytest.raises(FailedPrecondition, match="is a response stream"):
        await two.subscribe(request.response_stream).start()


async def test_only_the_first_reply_counts(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    one, two = clients
    stream = await ephemeral(one)
    listener = await two.subscribe(stream).start()
    waiting = asyncio.create_task(one.request(stream, b"q", timeout_s=20))
    request = await asyncio.wait_for(listener.receive_batch(), 10)
    assert request is not None
    await two.reply(request.response_stream, b"first")
    with pytest.raises(NotFound):
        await two.reply(request.response_stream, b"second")
    assert (await waiting).payload == b"first"


# -- CLI -----------------------------------------------------------------------------------


def tamto_env(cluster: TestCluster) -> dict[str, str]:
    return {**os.environ, "TAMTO_URL": cluster.url, "TAMTO_API_KEY": cluster.credential}


async def tamto(cluster: TestCluster, *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tamto_cli",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=tamto_env(cluster),
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode or 0, out.decode(), err.decode()


async def test_cli_pub_topic_sub_match_group_and_request(
    two_gateways: tuple[TestCluster, str], clients: tuple[tamto_sdk.Client, tamto_sdk.Client]
) -> None:
    cluster, _ = two_gateways
    one, two = clients
    stream = unique("eph-cli")
    code, out, err = await tamto(cluster, "stream", "ensure", stream, "--kind", "ephemeral")
    assert code == 0, err
    code, out, err = await tamto(cluster, "stream", "describe", stream, "--json")
    assert code == 0, err
    assert '"kind": "ephemeral"' in out
    assert '"overflow": "drop_oldest"' in out

    # tamto pub --topic: an SDK subscriber on the other gateway receives it.
    async with two.subscribe(stream, match="cli.*") as sub:
        code, out, err = await tamto(cluster, "pub", stream, "--topic", "cli.a", "hello", "world")
        assert code == 0, err
        assert out.strip() == f"{stream}: 2 published to topic 'cli.a'"
        got = [m.payload async for m in _take(sub, 2)]
    assert got == [b"hello", b"world"]

    # tamto sub --match --group --count: runs until it has two matching messages.
    sub_process = asyncio.create_task(
        tamto(cluster, "sub", stream, "--match", "x.#", "--group", "g", "--count", "2")
    )
    async with one.ephemeral_producer(stream) as producer:

        async def published_until_it_exits() -> bool:
            await producer.send_batch([b"skip"], topic="y")
            await producer.send_batch([b"take"], topic="x.b")
            return sub_process.done()

        await eventually(published_until_it_exits, 60, "tamto sub got two messages")
    code, out, err = sub_process.result()
    assert code == 0, err
    assert out.splitlines() == [f"{stream}[x.b]\t\ttake"] * 2

    # tamto request: answered by a handler, or the server's timeout (exit 12).
    async with two.reply_handler(stream, lambda m: m.payload.upper(), match="ask"):
        code, out, err = await tamto(cluster, "request", stream, "hi", "--topic", "ask")
        assert (code, out) == (0, "HI\n"), err
    code, out, err = await tamto(
        cluster, "request", stream, "hi", "--timeout-s", "0.2", "--wait-for-responder"
    )
    assert code == 12  # DEADLINE_EXCEEDED
    assert "no reply on response stream" in err
    code, out, err = await tamto(cluster, "request", stream, "hi", "--timeout-s", "30")
    assert code == 11  # UNAVAILABLE: no responders
    assert "no responders" in err


async def _take(
    sub: EphemeralSubscription, count: int
) -> AsyncIterator[tamto_sdk.EphemeralMessage]:
    for _ in range(count):
        yield await asyncio.wait_for(anext(sub), 10)


async def test_batches_larger_than_a_bus_message_travel_in_slices(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    """NATS carries 1 MiB per message: a 1.8 MB batch arrives whole, in slices; one
    message too large for the bus is refused naming the limit."""
    one, two = clients
    stream = await ephemeral(one)
    payloads = [bytes([i]) * 600_000 for i in range(3)]
    async with two.subscribe(stream) as sub:
        async with one.ephemeral_producer(stream) as producer:
            await producer.send_batch(payloads)
            got = [m.payload async for m in _take(sub, 3)]
            assert got == payloads
            with pytest.raises(InvalidArgument, match="exceeds what the bus carries"):
                await producer.send_batch([bytes(1_046_000)])
