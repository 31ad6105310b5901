"""The stream registry against a real etcd (and NATS for its events)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace

import aetcd
import nats
import pytest
from nats.aio.client import Client as NatsClient

from tamto_common.config import parse_endpoints
from tamto_common.deletions import StreamDeletion, deletion_key
from tamto_common.errors import FailedPrecondition, InvalidArgument, NotFound
from tamto_common.ledgers import ledgers_key
from tamto_common.membership import connect_etcd
from tamto_common.streams import (
    DEFAULT_ACK_TIMEOUT_MS,
    DEFAULT_DEDUP_WINDOW_MS,
    DEFAULT_FSYNC_INTERVAL_MS,
    StreamDef,
    read_stream,
    stream_key,
)
from tamto_gateway.streams import StreamRegistry
from tamto_testing.waiting import eventually


def unique(prefix: str = "s") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def etcd(etcd_endpoint: str) -> AsyncIterator[aetcd.Client]:
    client = await connect_etcd(parse_endpoints(etcd_endpoint))
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[NatsClient]:
    client = await nats.connect(nats_url)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def registry(etcd: aetcd.Client) -> StreamRegistry:
    return StreamRegistry(etcd, max_partitions=64)


def full(name: str) -> StreamDef:
    return StreamDef(
        name=name,
        partitions=4,
        retention_ms=7 * 86_400_000,
        retention_bytes=10 << 30,
        dedup_window_ms=600_000,
        ack_timeout_ms=10_000,
        max_deliveries=5,
        max_lag=10_000,
        dead_letter_stream=f"{name}-poison",
        durability="interval",
        fsync_interval_ms=25,
    )


async def stored_raw(etcd: aetcd.Client, name: str) -> dict[str, object]:
    kv = await etcd.get(stream_key(name))
    assert kv is not None
    return dict(json.loads(kv.value))


# -- ensure -----------------------------------------------------------------------


async def test_ensure_creates_with_defaults(registry: StreamRegistry, etcd: aetcd.Client) -> None:
    name = unique()
    result = await registry.ensure(StreamDef(name, 3), overwrite=False)
    assert result.created
    assert result.differences == []
    stored = await read_stream(etcd, name)
    assert stored == StreamDef(name, 3)
    assert stored.retention_ms == 0
    assert stored.retention_bytes == 0
    assert stored.dedup_window_ms == DEFAULT_DEDUP_WINDOW_MS == 120_000
    assert stored.ack_timeout_ms == DEFAULT_ACK_TIMEOUT_MS == 30_000
    assert stored.max_deliveries == 0
    assert stored.max_lag == 0
    assert stored.durability == "group"
    assert stored.fsync_interval_ms == 0
    assert stored.dead_letter_stream == ""
    assert stored.dead_letter == f"{name}.dlq"


async def test_ensure_stores_every_setting(registry: StreamRegistry, etcd: aetcd.Client) -> None:
    wanted = full(unique())
    result = await registry.ensure(wanted, overwrite=False)
    assert result.created
    assert result.stream == wanted
    assert await read_stream(etcd, wanted.name) == wanted
    raw = await stored_raw(etcd, wanted.name)
    assert raw["ack_timeout_ms"] == 10_000
    assert raw["max_deliveries"] == 5
    assert raw["durability"] == "interval"


async def test_ensure_is_idempotent(registry: StreamRegistry, etcd: aetcd.Client) -> None:
    wanted = full(unique())
    await registry.ensure(wanted, overwrite=False)
    before = await etcd.get(stream_key(wanted.name))
    for overwrite in (False, True):
        again = await registry.ensure(wanted, overwrite=overwrite)
        assert not again.created
        assert again.differences == []
        assert again.stream == wanted
    after = await etcd.get(stream_key(wanted.name))
    assert before is not None
    assert after is not None
    assert after.mod_revision == before.mod_revision, "an equal ensure must not write"


async def test_differences_are_reported_per_field_without_change(
    registry: StreamRegistry, etcd: aetcd.Client
) -> None:
    stored = full(unique())
    await registry.ensure(stored, overwrite=False)
    wanted = replace(
        stored,
        retention_ms=1000,
        ack_timeout_ms=2000,
        max_deliveries=0,
        dead_letter_stream="",
        durability="group",
        fsync_interval_ms=0,
    )
    result = await registry.ensure(wanted, overwrite=False)
    assert not result.created
    assert result.stream == stored
    assert result.differences == [
        "retention_ms: stored 604800000, requested 1000",
        "ack_timeout_ms: stored 10000, requested 2000",
        "max_deliveries: stored 5, requested 0",
        f"dead_letter_stream: stored '{stored.name}-poison', requested '{stored.name}.dlq'",
        "durability: stored 'interval', requested 'group'",
        "fsync_interval_ms: stored 25, requested 0",
    ]
    assert await read_stream(etcd, stored.name) == stored


async def test_overwrite_applies_the_request(registry: StreamRegistry, etcd: aetcd.Client) -> None:
    stored = full(unique())
    await registry.ensure(stored, overwrite=False)
    wanted = replace(stored, ack_timeout_ms=2000, max_lag=0, retention_bytes=0)
    result = await registry.ensure(wanted, overwrite=True)
    assert not result.created
    assert result.stream == wanted
    assert [d.split(":")[0] for d in result.differences] == [
        "retention_bytes",
        "ack_timeout_ms",
        "max_lag",
    ]
    assert await read_stream(etcd, stored.name) == wanted
    assert await registry.describe(stored.name) == wanted


async def test_partition_count_never_changes(registry: StreamRegistry, etcd: aetcd.Client) -> None:
    stored = full(unique())
    await registry.ensure(stored, overwrite=False)
    wanted = replace(stored, partitions=8, ack_timeout_ms=1000)
    reported = await registry.ensure(wanted, overwrite=False)
    assert reported.differences == [
        "partitions: stored 4, requested 8",
        "ack_timeout_ms: stored 10000, requested 1000",
    ]
    with pytest.raises(FailedPrecondition, match="has 4 partitions, requested 8"):
        await registry.ensure(wanted, overwrite=True)
    assert await read_stream(etcd, stored.name) == stored, "nothing may change"


async def test_equivalent_spellings_are_not_differences(registry: StreamRegistry) -> None:
    name = unique()
    created = await registry.ensure(
        StreamDef(name, 1, dead_letter_stream=f"{name}.dlq", durability="interval"),
        overwrite=False,
    )
    assert created.stream.dead_letter_stream == ""
    assert created.stream.fsync_interval_ms == DEFAULT_FSYNC_INTERVAL_MS
    again = await registry.ensure(
        StreamDef(name, 1, durability="interval", fsync_interval_ms=DEFAULT_FSYNC_INTERVAL_MS),
        overwrite=False,
    )
    assert again.differences == []


async def test_a_stream_deleted_meanwhile_is_created(
    registry: StreamRegistry, etcd: aetcd.Client
) -> None:
    name = unique()
    await registry.ensure(StreamDef(name, 2), overwrite=False)
    await etcd.delete(stream_key(name))
    result = await registry.ensure(StreamDef(name, 5), overwrite=False)
    assert result.created
    assert result.stream.partitions == 5


# -- validation -------------------------------------------------------------------

BAD: list[tuple[dict[str, object], str]] = [
    ({"partitions": 0}, "partitions must be between 1 and 64, got 0"),
    ({"partitions": -1}, "partitions must be between 1 and 64, got -1"),
    ({"partitions": 65}, "partitions must be between 1 and 64, got 65"),
    ({"retention_ms": -5}, "retention_ms must be between 0 and 9223372036854775807 (0: forever)"),
    ({"retention_bytes": 2**64}, "retention_bytes must be between 0 and 9223372036854775807"),
    ({"dedup_window_ms": 0}, "dedup_window_ms must be between 1 and 604800000, got 0"),
    ({"dedup_window_ms": 604_800_001}, "dedup_window_ms must be between 1 and 604800000"),
    ({"ack_timeout_ms": 99}, "ack_timeout_ms must be between 100 and 86400000, got 99"),
    ({"ack_timeout_ms": 86_400_001}, "ack_timeout_ms must be between 100 and 86400000"),
    ({"max_deliveries": 10_001}, "max_deliveries must be between 0 and 10000 (0: never"),
    ({"max_lag": -1}, "max_lag must be between 0 and 9223372036854775807 (0: never"),
    ({"durability": "sometimes"}, "durability must be one of 'group', 'interval', got 'sometimes'"),
    (
        {"fsync_interval_ms": 10},
        "fsync_interval_ms applies only with durability 'interval', got 10 with durability 'group'",
    ),
    (
        {"durability": "interval", "fsync_interval_ms": 60_001},
        "fsync_interval_ms must be between 1 and 60000, got 60001",
    ),
    ({"dead_letter_stream": "no spaces"}, "illegal dead_letter_stream name 'no spaces'"),
    ({"dead_letter_stream": ".hidden"}, "illegal dead_letter_stream name '.hidden'"),
    ({"kind": "response"}, "kind must be one of 'persistent', 'ephemeral', got 'response'"),
    ({"ack_timeout_ms": "30s"}, "ack_timeout_ms must be an integer, got '30s'"),
]


@pytest.mark.parametrize(("change", "message"), BAD, ids=[m.split(" ")[0] for _, m in BAD])
async def test_invalid_values_are_refused_naming_field_and_range(
    registry: StreamRegistry, etcd: aetcd.Client, change: dict[str, object], message: str
) -> None:
    name = unique()
    wanted = replace(StreamDef(name, 1), **change)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument) as info:
        await registry.ensure(wanted, overwrite=False)
    assert message in str(info.value)
    assert await etcd.get(stream_key(name)) is None


async def test_dead_letter_stream_must_not_be_the_stream_itself(
    registry: StreamRegistry,
) -> None:
    name = unique()
    with pytest.raises(InvalidArgument, match="dead_letter_stream must differ from the stream"):
        await registry.ensure(StreamDef(name, 1, dead_letter_stream=name), overwrite=False)


@pytest.mark.parametrize("name", ["", "has space", "-dash", "a" * 129, "x/y"])
async def test_illegal_stream_names_are_refused(registry: StreamRegistry, name: str) -> None:
    with pytest.raises(InvalidArgument, match="stream name"):
        await registry.ensure(StreamDef(name, 1), overwrite=False)


async def test_a_long_name_needs_an_explicit_dead_letter_stream_only_when_dead_lettering(
    registry: StreamRegistry,
) -> None:
    name = unique("a" * 116)
    assert len(name) > 124
    await registry.ensure(StreamDef(name, 1), overwrite=False)
    with pytest.raises(InvalidArgument, match="name a dead-letter stream explicitly"):
        await registry.ensure(StreamDef(name, 1, max_deliveries=3), overwrite=True)
    await registry.ensure(
        StreamDef(name, 1, max_deliveries=3, dead_letter_stream="short-dlq"), overwrite=True
    )


# -- schema evolution, describe, list -------------------------------------------------


async def test_definitions_written_before_a_field_existed_read_with_defaults(
    registry: StreamRegistry, etcd: aetcd.Client
) -> None:
    name = unique()
    old = {"name": name, "partitions": 2, "kind": "persistent", "from_the_future": 1}
    await etcd.put(stream_key(name), json.dumps(old).encode())
    described = await registry.describe(name, fresh=True)
    assert described == StreamDef(name, 2)
    assert described.ack_timeout_ms == DEFAULT_ACK_TIMEOUT_MS
    assert (await registry.ensure(StreamDef(name, 2), overwrite=False)).differences == []


async def test_describe_and_list_carry_the_config(registry: StreamRegistry) -> None:
    first, second = full(unique("b")), StreamDef(unique("a"), 1, ack_timeout_ms=500)
    await registry.ensure(first, overwrite=False)
    await registry.ensure(second, overwrite=False)
    assert await registry.describe(first.name, fresh=True) == first
    listed = {s.name: s for s in await registry.list()}
    assert listed[first.name] == first
    assert listed[second.name] == second
    names = [s.name for s in await registry.list()]
    assert names == sorted(names)
    with pytest.raises(NotFound, match="does not exist"):
        await registry.describe(unique("missing"))


# -- delete -----------------------------------------------------------------------


async def test_delete_records_the_deletion_and_keeps_the_rest_for_storage(
    registry: StreamRegistry, etcd: aetcd.Client
) -> None:
    name = unique()
    await registry.ensure(StreamDef(name, 2), overwrite=False)
    owner = f"/tamto/owners/{name}/0".encode()
    await etcd.put(owner, b'{"owner": "router-1", "epoch": 7}')
    ensembles = {"ledgers": [{"epoch": 7, "ensemble": ["storage-x", "storage-y"]}]}
    await etcd.put(ledgers_key(name, 1), json.dumps(ensembles).encode())
    try:
        assert await registry.describe(name) == StreamDef(name, 2)  # cached now
        assert await registry.delete(name) is True
        assert await etcd.get(stream_key(name)) is None
        # Owners and ledgers are storage's to remove, after the grace period.
        owned = await etcd.get(owner)
        assert owned is not None
        assert owned.value == b'{"owner": "router-1", "epoch": 7}'
        kv = await etcd.get(deletion_key(name))
        assert kv is not None
        record = StreamDeletion.from_json(kv.value)
        assert (record.stream, record.partitions, record.shared_done) == (name, 2, False)
        assert {"storage-x", "storage-y"} <= set(record.pending)
        with pytest.raises(NotFound):
            await registry.describe(name)
        assert name not in [s.name for s in await registry.list()]
        assert await registry.delete(name) is False
    finally:
        for key in (owner, ledgers_key(name, 1), deletion_key(name)):
            await etcd.delete(key)


async def test_a_name_being_deleted_cannot_be_created_until_its_record_goes(
    registry: StreamRegistry, etcd: aetcd.Client
) -> None:
    name = unique()
    await registry.ensure(StreamDef(name, 2), overwrite=False)
    assert await registry.delete(name) is True
    with pytest.raises(FailedPrecondition, match="being removed"):
        await registry.ensure(StreamDef(name, 2), overwrite=False)
    await etcd.delete(deletion_key(name))  # what storage does once all is removed
    assert (await registry.ensure(StreamDef(name, 2), overwrite=False)).created


async def test_deleting_an_ephemeral_stream_records_nothing(
    registry: StreamRegistry, etcd: aetcd.Client
) -> None:
    name = unique()
    ephemeral = StreamDef(
        name,
        1,
        kind="ephemeral",
        buffer_messages=10,
        overflow="drop_oldest",
        request_timeout_ms=1000,
    )
    await registry.ensure(ephemeral, overwrite=False)
    assert await registry.delete(name) is True
    assert await etcd.get(deletion_key(name)) is None
    assert (await registry.ensure(ephemeral, overwrite=False)).created


async def test_delete_of_a_missing_stream_returns_false(registry: StreamRegistry) -> None:
    assert await registry.delete(unique("never")) is False


async def test_events_on_create_change_and_delete(etcd: aetcd.Client, bus: NatsClient) -> None:
    registry = StreamRegistry(etcd, 64, bus)
    name = unique()
    events = await bus.subscribe("tamto.events.stream.>")
    await bus.flush()
    await registry.ensure(StreamDef(name, 3), overwrite=False)
    await registry.ensure(StreamDef(name, 3), overwrite=False)  # no change: no event
    await registry.ensure(StreamDef(name, 3, ack_timeout_ms=1000), overwrite=True)
    await registry.delete(name)
    await registry.delete(name)  # nothing deleted: no event
    got = []
    for _ in range(3):
        msg = await events.next_msg(timeout=5)
        got.append((msg.subject, json.loads(msg.data)))
    ours = [(s, d) for s, d in got if d["stream"] == name]
    assert ours == [
        ("tamto.events.stream.changed", {"stream": name, "partitions": 3}),
        ("tamto.events.stream.changed", {"stream": name, "partitions": 3}),
        ("tamto.events.stream.deleted", {"stream": name, "partitions": 3}),
    ]
    await events.unsubscribe()


async def test_a_delete_elsewhere_drops_the_cached_definition(
    etcd: aetcd.Client, bus: NatsClient, nats_url: str
) -> None:
    other_bus = await nats.connect(nats_url)
    try:
        here = StreamRegistry(etcd, 64, bus)
        there = StreamRegistry(etcd, 64, other_bus)
        watching = await here.watch_events()
        assert watching is not None
        await bus.flush()
        name = unique()
        await there.ensure(StreamDef(name, 2), overwrite=False)

        async def cached_is_gone() -> bool:
            try:
                await here.describe(name)
            except NotFound:
                return True
            return False

        assert (await here.describe(name)).partitions == 2  # cached now
        await there.delete(name)
        await eventually(cached_is_gone, 10, "the deleted stream to leave the cache")
        await etcd.delete(deletion_key(name))  # storage removed the old stream's data
        # Re-created with another partition count: the cache must not keep the old one.
        await there.ensure(StreamDef(name, 5), overwrite=False)

        async def five() -> bool:
            return (await here.describe(name)).partitions == 5

        await eventually(five, 10, "the re-created stream's 5 partitions")
        await watching.unsubscribe()
    finally:
        await other_bus.close()


# -- replication -------------------------------------------------------------


@pytest.fixture
def three_nodes(etcd: aetcd.Client) -> StreamRegistry:
    """A registry that sees three live storage nodes."""
    return StreamRegistry(etcd, max_partitions=64, storage_nodes=lambda: 3)


async def test_replication_defaults_to_three_nodes_and_a_majority(
    three_nodes: StreamRegistry, etcd: aetcd.Client
) -> None:
    name = unique()
    result = await three_nodes.ensure(StreamDef(name, 1, replication_factor=0, ack_quorum=0), False)
    assert (result.stream.replication_factor, result.stream.ack_quorum) == (3, 2)
    stored = await stored_raw(etcd, name)
    assert (stored["replication_factor"], stored["ack_quorum"]) == (3, 2)
    # Asking again with the defaults differs in nothing, even once fewer nodes are live.
    two = StreamRegistry(etcd, max_partitions=64, storage_nodes=lambda: 2)
    again = await two.ensure(StreamDef(name, 1, replication_factor=0, ack_quorum=0), False)
    assert again.differences == []
    # Naming R alone gives its majority as Q.
    one = await three_nodes.ensure(StreamDef(name, 1, replication_factor=1, ack_quorum=0), True)
    assert (one.stream.replication_factor, one.stream.ack_quorum) == (1, 1)


async def test_replication_default_follows_fewer_nodes(etcd: aetcd.Client) -> None:
    registry = StreamRegistry(etcd, max_partitions=64, storage_nodes=lambda: 2)
    result = await registry.ensure(
        StreamDef(unique(), 1, replication_factor=0, ack_quorum=0), False
    )
    assert (result.stream.replication_factor, result.stream.ack_quorum) == (2, 2)


BAD_REPLICATION = [
    ({"replication_factor": 4}, "replication_factor 4 is more than the 3 live storage node(s)"),
    ({"replication_factor": 3, "ack_quorum": 4}, "ack_quorum 4 is more than replication_factor 3"),
    ({"replication_factor": 2, "ack_quorum": -1}, "ack_quorum must be at least 1, got -1"),
    ({"replication_factor": -2}, "replication_factor must be between 1 and"),
]


@pytest.mark.parametrize(
    ("change", "message"), BAD_REPLICATION, ids=[m.split(" ")[0] for _, m in BAD_REPLICATION]
)
async def test_bad_replication_is_refused_naming_the_field(
    three_nodes: StreamRegistry, etcd: aetcd.Client, change: dict[str, int], message: str
) -> None:
    name = unique()
    with pytest.raises(InvalidArgument) as info:
        await three_nodes.ensure(replace(StreamDef(name, 1), **change), overwrite=False)  # type: ignore[arg-type]
    assert message in str(info.value)
    assert await etcd.get(stream_key(name)) is None


async def test_overwriting_with_more_replicas_than_nodes_is_refused(
    three_nodes: StreamRegistry, etcd: aetcd.Client
) -> None:
    name = unique()
    await three_nodes.ensure(StreamDef(name, 1, replication_factor=3, ack_quorum=2), False)
    with pytest.raises(InvalidArgument, match="replication_factor 5 is more than the 3"):
        await three_nodes.ensure(StreamDef(name, 1, replication_factor=5, ack_quorum=3), True)
    assert (await stored_raw(etcd, name))["replication_factor"] == 3
