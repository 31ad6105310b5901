"""Property-based fuzzing of each RPC family at and around its documented limits.

docs/validation.md lists every field a client controls with its bound and its
cost class. Each property here draws requests of one family whose lists and
strings sit at, just under and just over those bounds (and anywhere between),
shaped the ways that cost most (disjoint ranges, many `*` in patterns, long
topics), sends them through the real gateway while `PublishProbe` publishes on
another stream from another client, and asserts, per family:

- every answer is OK or a precise status (`PRECISE`, with details), and a list
  over its limit is INVALID_ARGUMENT naming the field;
- every request is answered within `REQUEST_BOUND_S`;
- the other client's publishes stay under 1 s;
- no service's resident memory grows more than `MEMORY_BOUND_BYTES` over the
  family's campaign.

CI runs a few derandomized examples per family; TAMTO_LONG_TESTS=1 runs many
random ones (docs/testing.md, Fuzzing).
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.message_factory import GetMessageClass
from hypothesis import example, given
from hypothesis import strategies as st

import tamto_sdk
from tamto_common.streams import MAX_PARTITIONS
from tamto_gateway.topics import MAX_PATTERN_BYTES, MAX_TOPIC_BYTES
from tamto_protocol.batch import BatchColumns, encode_batch
from tamto_protocol.limits import MAX_GRANTS_PER_ROLE, MAX_RANGES_PER_REQUEST
from tamto_protocol.v1 import auth_pb2, gateway_pb2, messages_pb2
from tamto_testing.cluster import TestCluster
from tests.e2e.members import gauge, metrics_of
from tests.e2e.publish_probe import PUBLISH_BOUND_S, PublishProbe
from tests.e2e.test_fuzz_gateway import PRECISE, SERVICE
from tests.fuzz import LONG, fuzz_settings

pytestmark = [pytest.mark.e2e, pytest.mark.solo, pytest.mark.timeout(7200 if LONG else 300)]

Code = grpc.StatusCode
#: The longest one request at its limits may take to be answered, deliveries and
#: waits included (a coarse check: `LOOP_BOUND_S` is the precise one).
REQUEST_BOUND_S = 10.0
#: The longest any service's event loop may be held while a family's requests are
#: served (docs/validation.md): `tamto_event_loop_lag_max_seconds`.
LOOP_BOUND_S = 1.0
#: The most one family's campaign may add to a service's resident memory.
MEMORY_BOUND_BYTES = 128 * 1024 * 1024
SERVICES = ("gateway", "router", "storage", "auth")
#: Messages in the fuzzed stream: every range a request names may be stored.
STORED = 2 * MAX_RANGES_PER_REQUEST + 2


def sizes(limit: int) -> st.SearchStrategy[int]:
    """List lengths at, around and below `limit`."""
    return st.sampled_from([0, 1, limit - 1, limit, limit + 1]) | st.integers(0, limit + 1)


class Client:
    """A plain gRPC channel to the gateway, with a token; every call timed."""

    def __init__(self, cluster: TestCluster) -> None:
        self.channel = grpc.insecure_channel(cluster.gateway_address)
        self.metadata: list[tuple[str, str]] = []
        self.slowest = 0.0
        token = self.unary(
            "Authenticate", gateway_pb2.AuthenticateRequest(api_key=cluster.credential)
        )
        assert not isinstance(token, grpc.RpcError), token
        self.metadata = [("authorization", f"Bearer {token.token}")]
        self.subject = self.unary("WhoAmI", gateway_pb2.WhoAmIRequest()).subject

    def unary(self, method: str, request: Any) -> Any:
        """The response, or the `grpc.RpcError` the call ended with."""
        output: Any = GetMessageClass(SERVICE.methods_by_name[method].output_type)
        call = self.channel.unary_unary(
            f"/{SERVICE.full_name}/{method}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=output.FromString,
        )
        started = time.perf_counter()
        try:
            return call(request, metadata=self.metadata, timeout=30)
        except grpc.RpcError as exc:
            return exc
        finally:
            self.slowest = max(self.slowest, time.perf_counter() - started)

    def consume(self, requests: list[messages_pb2.ConsumeRequest]) -> grpc.RpcError | None:
        """A Consume stream of `requests` then a close; the error it ended with."""
        call = self.channel.stream_stream(
            f"/{SERVICE.full_name}/Consume",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=lambda b: b,
        )
        close = messages_pb2.ConsumeRequest(close=messages_pb2.Close())
        started = time.perf_counter()
        try:
            for _ in call(iter([*requests, close]), metadata=self.metadata, timeout=30):
                pass
        except grpc.RpcError as exc:
            return exc
        finally:
            self.slowest = max(self.slowest, time.perf_counter() - started)
        return None


def precise(answer: Any, what: str, over: str | None = None) -> None:
    """`answer` is OK or a precise status; `over`: a field over its limit, which
    must be INVALID_ARGUMENT naming it."""
    if over is not None:
        assert isinstance(answer, grpc.RpcError), f"{what}: {over} over its limit was accepted"
        assert answer.code() == Code.INVALID_ARGUMENT, (what, answer.code(), answer.details())
        assert over in (answer.details() or ""), (what, answer.details())
        return
    if isinstance(answer, grpc.RpcError):
        assert answer.code() in PRECISE, (what, answer.code(), answer.details())
        assert answer.details(), (what, answer.code())


@pytest.fixture(scope="module")
def fuzzed(tamto_cluster: TestCluster) -> Iterator[tuple[Client, str]]:
    """A client, and a stream of one partition holding `STORED` messages."""
    client = Client(tamto_cluster)
    stream = f"fuzz-limits-{uuid.uuid4().hex[:6]}"
    config = messages_pb2.StreamConfig(partitions=1)
    made = client.unary("EnsureStream", gateway_pb2.EnsureStreamRequest(name=stream, config=config))
    assert not isinstance(made, grpc.RpcError), made
    none = [None] * STORED
    batch = encode_batch(BatchColumns([b"m"] * STORED, none, none, none, none))
    stored = client.unary(
        "Publish",
        gateway_pb2.PublishRequest(
            stream=stream, batch=messages_pb2.RecordBatch(arrow_ipc=batch, count=STORED)
        ),
    )
    assert not isinstance(stored, grpc.RpcError), stored
    try:
        yield client, stream
    finally:
        client.channel.close()


def within_bounds(cluster: TestCluster, client: Client, campaign: Callable[[], None]) -> None:
    """Run `campaign` while another client publishes; check the family's bounds."""
    before = asyncio.run(_process_gauges(cluster))
    client.slowest = 0.0
    with PublishProbe(cluster) as probe:
        campaign()
    after = asyncio.run(_process_gauges(cluster))
    assert client.slowest < REQUEST_BOUND_S, client.slowest
    assert probe.slowest < PUBLISH_BOUND_S, sorted(probe.latencies)[-5:]
    grown = {s: after[s][0] - before[s][0] for s in SERVICES}
    assert all(g < MEMORY_BOUND_BYTES for g in grown.values()), grown
    # The longest hold since each process started: a new longest one is this campaign's.
    held = {s: after[s][1] for s in SERVICES if after[s][1] > before[s][1]}
    assert all(h < LOOP_BOUND_S for h in held.values()), held


async def _process_gauges(cluster: TestCluster) -> dict[str, tuple[float, float]]:
    """Each service's resident bytes and longest event-loop hold so far."""
    gauges = {}
    for service in SERVICES:
        metrics = await metrics_of(cluster, service)
        gauges[service] = (
            gauge(metrics, "process_resident_memory_bytes"),
            gauge(metrics, "tamto_event_loop_lag_max_seconds"),
        )
    return gauges


def ranges(n: int, shape: str, seed: int) -> list[messages_pb2.OffsetRange]:
    """n ranges of a shape: disjoint (the costliest), overlapping, reversed or random."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if shape == "disjoint":
            first = last = 2 * i
        elif shape == "overlapping":
            first = rng.randrange(STORED)
            last = min(STORED - 1, first + rng.randrange(50))
        elif shape == "reversed":
            first, last = 2 * i + 1, 2 * i
        else:
            first, last = rng.randrange(-5, 2**40), rng.randrange(-5, 2**40)
        out.append(messages_pb2.OffsetRange(first=first, last=last))
    return out


VERBS = ["ack", "nack", "term", "in_progress"]


def verb_request(verb: str, partition: int, rs: list[Any]) -> messages_pb2.ConsumeRequest:
    if verb == "ack":
        return messages_pb2.ConsumeRequest(
            ack=messages_pb2.PartitionAcks(partition=partition, ranges=rs)
        )
    if verb == "nack":
        nack = messages_pb2.PartitionNacks(partition=partition, ranges=rs, delay_ms=1000)
        return messages_pb2.ConsumeRequest(nack=nack)
    if verb == "term":
        return messages_pb2.ConsumeRequest(
            term=messages_pb2.PartitionTerms(partition=partition, ranges=rs)
        )
    return messages_pb2.ConsumeRequest(
        in_progress=messages_pb2.PartitionProgress(partition=partition, ranges=rs)
    )


def test_consume_verbs_at_their_limits(
    tamto_cluster: TestCluster, fuzzed: tuple[Client, str]
) -> None:
    client, stream = fuzzed

    @fuzz_settings(ci_examples=6, long_examples=300)
    @example(verbs=[("ack", MAX_RANGES_PER_REQUEST, "disjoint", 0)] * 2, kind=1, credit=0)
    @example(verbs=[("nack", MAX_RANGES_PER_REQUEST, "disjoint", 0)], kind=3, credit=2**32 - 1)
    @example(verbs=[("ack", MAX_RANGES_PER_REQUEST + 1, "disjoint", 0)], kind=4, credit=100)
    @given(
        verbs=st.lists(
            st.tuples(
                st.sampled_from(VERBS),
                sizes(MAX_RANGES_PER_REQUEST),
                st.sampled_from(["disjoint", "disjoint", "overlapping", "reversed", "random"]),
                st.integers(0, 2**16),
            ),
            min_size=1,
            max_size=3,
        ),
        kind=st.sampled_from([1, 3, 4]),  # exclusive, shared, key-shared
        credit=st.sampled_from([0, 100, 2**32 - 1]),
    )
    def fuzz(verbs: list[tuple[str, int, str, int]], kind: int, credit: int) -> None:
        subscribe = messages_pb2.Subscribe(
            stream=stream,
            subscription=f"s{kind}",
            type=kind,  # type: ignore[arg-type]
        )
        requests = [
            messages_pb2.ConsumeRequest(subscribe=subscribe),
            messages_pb2.ConsumeRequest(credit=messages_pb2.Credit(messages=credit)),
        ]
        for verb, n, shape, seed in verbs:
            requests.append(verb_request(verb, 0, ranges(n, shape, seed)))
            if n > MAX_RANGES_PER_REQUEST:
                break  # the session ends with the first refusal
        # Over the limit in the first verb: refused for that; later, an earlier verb
        # may have ended the session first (with its own precise status).
        first_verb, first_n = verbs[0][0], verbs[0][1]
        over = f"{first_verb}.ranges" if first_n > MAX_RANGES_PER_REQUEST else None
        precise(client.consume(requests), f"Consume({[(v, n, s) for v, n, s, _ in verbs]})", over)

    within_bounds(tamto_cluster, client, fuzz)


def test_subscriptions_at_their_limits(
    tamto_cluster: TestCluster, fuzzed: tuple[Client, str]
) -> None:
    client, stream = fuzzed

    @fuzz_settings(ci_examples=8, long_examples=400)
    @example(field="subscribe.partitions", n=MAX_PARTITIONS + 1, value=0)
    @example(field="seek.offsets", n=MAX_PARTITIONS, value=0)
    @given(
        field=st.sampled_from(["subscribe.partitions", "seek.partitions", "seek.offsets"]),
        n=sizes(MAX_PARTITIONS),
        value=st.sampled_from([0, 1, 2**31]) | st.integers(0, 2**32 - 1),
    )
    def fuzz(field: str, n: int, value: int) -> None:
        over = field.split(".")[1] if n > MAX_PARTITIONS else None
        if field == "subscribe.partitions":
            subscribe = messages_pb2.Subscribe(
                stream=stream, subscription="p", partitions=[(value + i) % 2**32 for i in range(n)]
            )
            answer = client.consume([messages_pb2.ConsumeRequest(subscribe=subscribe)])
        else:
            request = gateway_pb2.SeekSubscriptionRequest(stream=stream, subscription="p")
            if field == "seek.partitions":
                request.target.earliest = True
                request.partitions.extend([(value + i) % 2**32 for i in range(n)])
            else:
                for i in range(n):
                    request.offsets[(value + i) % 2**32] = i
            answer = client.unary("SeekSubscription", request)
        precise(answer, f"{field} x {n} from {value}", over)

    within_bounds(tamto_cluster, client, fuzz)


def test_security_at_its_limits(tamto_cluster: TestCluster, fuzzed: tuple[Client, str]) -> None:
    client, _ = fuzzed

    @fuzz_settings(ci_examples=6, long_examples=300)
    @example(n=MAX_GRANTS_PER_ROLE, stars=63, bind=True)
    @example(n=MAX_GRANTS_PER_ROLE + 1, stars=0, bind=False)
    @given(
        n=sizes(MAX_GRANTS_PER_ROLE),
        stars=st.integers(0, 63),
        bind=st.booleans(),
    )
    def fuzz(n: int, stars: int, bind: bool) -> None:
        # The costliest pattern to match a name against: many `*` between letters.
        pattern = ("a*" * stars + "b")[:128]
        role = f"fuzz-role-{n % 7}"
        grants = [auth_pb2.Grant(permission="consume", pattern=pattern)] * n
        answer = client.unary(
            "PutRole", auth_pb2.PutRoleRequest(role=auth_pb2.Role(name=role, grants=grants))
        )
        over = "role.grants" if n > MAX_GRANTS_PER_ROLE else None
        precise(answer, f"PutRole({n} x {pattern!r})", over)
        if bind and over is None:
            binding = auth_pb2.BindRoleRequest(subject=client.subject, role=role)
            precise(client.unary("BindRole", binding), "BindRole")
            # Every authorization of this client now looks through these grants.
            described = gateway_pb2.DescribeStreamRequest(name="a" * 200)
            precise(client.unary("DescribeStream", described), "DescribeStream")
            precise(client.unary("UnbindRole", binding), "UnbindRole")

    within_bounds(tamto_cluster, client, fuzz)


def test_streams_admin_and_reads_at_their_limits(
    tamto_cluster: TestCluster, fuzzed: tuple[Client, str]
) -> None:
    client, stream = fuzzed

    @fuzz_settings(ci_examples=8, long_examples=400)
    @given(
        count=st.sampled_from([0, 1, 999, 1000, 1001, 2**32 - 1]) | st.integers(0, 2**32 - 1),
        offset=st.sampled_from([-1, 0, STORED - 1, STORED, 2**63 - 1]),
        name_length=st.sampled_from([1, 254, 255, 256, 10_000]),
    )
    def fuzz(count: int, offset: int, name_length: int) -> None:
        read = gateway_pb2.GetMessagesRequest(stream=stream, offset=offset, count=count)
        precise(client.unary("GetMessages", read), f"GetMessages({offset}, {count})")
        name = "n" * name_length
        for method, request in [
            ("DescribeStream", gateway_pb2.DescribeStreamRequest(name=name)),
            ("DescribeStreamStats", gateway_pb2.DescribeStreamRequest(name=stream)),
            ("Lookup", gateway_pb2.LookupRequest(stream=name)),
            ("ListStreams", gateway_pb2.ListStreamsRequest()),
            ("ListSubscriptions", gateway_pb2.ListSubscriptionsRequest(stream=stream)),
        ]:
            precise(client.unary(method, request), f"{method}({name_length})")

    within_bounds(tamto_cluster, client, fuzz)


def test_publish_and_ephemeral_at_their_limits(
    tamto_cluster: TestCluster, fuzzed: tuple[Client, str]
) -> None:
    client, stream = fuzzed
    ephemeral = f"fuzz-eph-{uuid.uuid4().hex[:6]}"
    config = messages_pb2.StreamConfig(kind=messages_pb2.STREAM_KIND_EPHEMERAL)
    made = client.unary(
        "EnsureStream", gateway_pb2.EnsureStreamRequest(name=ephemeral, config=config)
    )
    assert not isinstance(made, grpc.RpcError), made

    @fuzz_settings(ci_examples=6, long_examples=300)
    @example(rows=10_000, headers=20, topic_length=MAX_TOPIC_BYTES, match_length=MAX_PATTERN_BYTES)
    @given(
        rows=st.sampled_from([1, 1000, 10_000]),
        headers=st.sampled_from([0, 1, 20]),
        topic_length=st.sampled_from([0, 1, MAX_TOPIC_BYTES, MAX_TOPIC_BYTES + 1]),
        match_length=st.sampled_from([1, MAX_PATTERN_BYTES, MAX_PATTERN_BYTES + 1]),
    )
    def fuzz(rows: int, headers: int, topic_length: int, match_length: int) -> None:
        batch = encode_batch(
            BatchColumns(
                [b"p"] * rows,
                [b"k"] * rows,
                [{f"h{j}": "v" for j in range(headers)} or None for _ in range(rows)],
                [None] * rows,
                [None] * rows,
            )
        )
        record = messages_pb2.RecordBatch(arrow_ipc=batch, count=rows)
        precise(
            client.unary("Publish", gateway_pb2.PublishRequest(stream=stream, batch=record)),
            f"Publish({rows} rows, {headers} headers)",
        )
        # Topics of one-letter words: the most words a topic of its length can hold.
        topic = ".".join(["a"] * ((topic_length + 1) // 2))[:topic_length]
        precise(
            client.unary(
                "PublishEphemeral",
                gateway_pb2.PublishEphemeralRequest(stream=ephemeral, topic=topic, batch=record),
            ),
            f"PublishEphemeral(topic of {topic_length})",
        )
        match = ".".join(["*", "#"] * match_length)[:match_length]
        subscribe = client.channel.unary_stream(
            f"/{SERVICE.full_name}/SubscribeEphemeral",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=lambda b: b,
        )
        request = gateway_pb2.SubscribeEphemeralRequest(stream=ephemeral, match=match)
        try:
            for _ in subscribe(request, metadata=client.metadata, timeout=0.5):
                pass
        except grpc.RpcError as exc:
            if exc.code() != Code.DEADLINE_EXCEEDED:  # still subscribed: fine
                precise(exc, f"SubscribeEphemeral(match of {match_length})")

    within_bounds(tamto_cluster, client, fuzz)


def test_the_services_keep_serving_after_the_campaigns(tamto_cluster: TestCluster) -> None:
    async def check() -> None:
        stream = f"after-limits-{uuid.uuid4().hex[:6]}"
        async with tamto_sdk.connect(tamto_cluster.url, api_key=tamto_cluster.credential) as c:
            await c.streams.ensure(stream, partitions=1)
            async with c.producer(stream) as producer:
                await (await producer.send(b"still serving"))

    asyncio.run(check())
