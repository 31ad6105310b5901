"""The stream admin API (ensure / describe / list / delete) against real services."""

from __future__ import annotations

import json
import subprocess
import uuid
from dataclasses import replace

import grpc
import nats
import pytest

import tamto_sdk
from tamto_protocol.batch import BatchColumns, encode_batch
from tamto_protocol.v1 import gateway_pb2, gateway_pb2_grpc, messages_pb2
from tamto_sdk import StreamConfig
from tamto_sdk.stream_config import Durability, RetentionPolicy, StreamInfo, StreamKind
from tamto_testing.cluster import TestCluster
from tamto_testing.waiting import eventually
from tests.e2e.gateway_calls import auth_metadata

from .test_cli_pub_sub import tamto

pytestmark = pytest.mark.e2e


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


FULL = StreamConfig(
    retention_ms=3 * 86_400_000,
    retention_bytes=1 << 30,
    retention_policy=RetentionPolicy.INTEREST,
    dedup_window_ms=300_000,
    ack_timeout_ms=5_000,
    max_deliveries=4,
    max_lag=5_000,
    dead_letter_stream="poison-box",
    durability=Durability.INTERVAL,
    fsync_interval_ms=20,
    replication_factor=1,
    ack_quorum=1,
)


async def test_create_describe_list_with_every_setting(tamto_client: tamto_sdk.Client) -> None:
    name = unique("full")
    created = await tamto_client.streams.ensure(name, partitions=3, config=FULL)
    assert created.created
    assert created.differences == []
    expected = StreamInfo(name, 3, StreamKind.PERSISTENT, FULL)
    assert created.stream == expected
    assert await tamto_client.streams.describe(name) == expected
    listed = {s.name: s for s in await tamto_client.streams.list()}
    assert listed[name] == expected


async def test_defaults_are_explicit_in_describe(tamto_client: tamto_sdk.Client) -> None:
    name = unique("plain")
    await tamto_client.streams.ensure(name, partitions=2)
    info = await tamto_client.streams.describe(name)
    assert info.partitions == 2
    # One storage node: R = min(3, 1) = 1 and Q = 1 // 2 + 1 = 1, explicit once stored.
    assert info.config == replace(
        StreamConfig(), dead_letter_stream=f"{name}.dlq", replication_factor=1, ack_quorum=1
    )
    assert info.config.ack_timeout_ms == 30_000
    assert info.config.dedup_window_ms == 120_000
    assert info.config.durability is Durability.GROUP_COMMIT


async def test_ensure_is_idempotent(tamto_client: tamto_sdk.Client) -> None:
    name = unique("same")
    await tamto_client.streams.ensure(name, partitions=2, config=FULL)
    for overwrite in (False, True):
        again = await tamto_client.streams.ensure(
            name, partitions=2, config=FULL, overwrite=overwrite
        )
        assert not again.created
        assert again.differences == []
        assert again.stream.config == FULL


async def test_differences_are_reported_and_kept_until_overwrite(
    tamto_client: tamto_sdk.Client,
) -> None:
    name = unique("diff")
    await tamto_client.streams.ensure(name, partitions=2, config=FULL)
    wanted = replace(
        FULL,
        ack_timeout_ms=60_000,
        max_deliveries=0,
        durability=Durability.GROUP_COMMIT,
        fsync_interval_ms=0,
    )
    kept = await tamto_client.streams.ensure(name, partitions=2, config=wanted)
    assert not kept.created
    assert kept.differences == [
        "ack_timeout_ms: stored 5000, requested 60000",
        "max_deliveries: stored 4, requested 0",
        "durability: stored 'interval', requested 'group'",
        "fsync_interval_ms: stored 20, requested 0",
    ]
    assert kept.stream.config == FULL
    assert (await tamto_client.streams.describe(name)).config == FULL

    applied = await tamto_client.streams.ensure(name, partitions=2, config=wanted, overwrite=True)
    assert applied.differences == kept.differences
    assert applied.stream.config == wanted
    assert (await tamto_client.streams.describe(name)).config == wanted


async def test_the_partition_count_never_changes(tamto_client: tamto_sdk.Client) -> None:
    name = unique("fixed")
    await tamto_client.streams.ensure(name, partitions=3)
    reported = await tamto_client.streams.ensure(name, partitions=5)
    assert reported.differences == ["partitions: stored 3, requested 5"]
    with pytest.raises(tamto_sdk.errors.FailedPrecondition) as info:
        await tamto_client.streams.ensure(
            name, partitions=5, config=replace(StreamConfig(), ack_timeout_ms=1_000), overwrite=True
        )
    assert info.value.code == "FAILED_PRECONDITION"
    assert "has 3 partitions, requested 5" in info.value.message
    described = await tamto_client.streams.describe(name)
    assert described.partitions == 3
    assert described.config.ack_timeout_ms == 30_000, "nothing may change"


INVALID: list[tuple[int, StreamConfig, str]] = [
    (0, StreamConfig(), "partitions must be between 1 and"),
    (-2, StreamConfig(), "partitions must be between 1 and"),
    (1025, StreamConfig(), "partitions must be between 1 and 1024, got 1025"),
    (1, StreamConfig(retention_ms=-1), "retention_ms must be between 0 and"),
    (1, StreamConfig(retention_ms=2**63), "retention_ms must be between 0 and 9223372036854775807"),
    (1, StreamConfig(dedup_window_ms=8 * 86_400_000), "dedup_window_ms must be between 1 and"),
    (1, StreamConfig(ack_timeout_ms=50), "ack_timeout_ms must be between 100 and 86400000, got 50"),
    (1, StreamConfig(max_deliveries=20_000), "max_deliveries must be between 0 and 10000"),
    (
        1,
        StreamConfig(fsync_interval_ms=10),
        "fsync_interval_ms applies only with durability 'interval'",
    ),
    (
        1,
        StreamConfig(durability=Durability.INTERVAL, fsync_interval_ms=120_000),
        "fsync_interval_ms must be between 1 and 60000, got 120000",
    ),
    (1, StreamConfig(dead_letter_stream="dead letters"), "illegal dead_letter_stream name"),
    (
        1,
        StreamConfig(replication_factor=2),
        "replication_factor 2 is more than the 1 live storage node(s)",
    ),
    (
        1,
        StreamConfig(replication_factor=1, ack_quorum=2),
        "ack_quorum 2 is more than replication_factor 1",
    ),
    (1, StreamConfig(ack_quorum=3), "ack_quorum 3 is more than replication_factor 1"),
    (1, StreamConfig(dead_letter_stream="x" * 129), "illegal dead_letter_stream name"),
]


@pytest.mark.parametrize(
    ("partitions", "config", "message"), INVALID, ids=[m.split(" ")[0] for *_, m in INVALID]
)
async def test_invalid_values_are_refused_with_a_precise_message(
    tamto_client: tamto_sdk.Client, partitions: int, config: StreamConfig, message: str
) -> None:
    name = unique("bad")
    with pytest.raises(tamto_sdk.errors.InvalidArgument) as info:
        await tamto_client.streams.ensure(name, partitions=partitions, config=config)
    assert message in info.value.message
    with pytest.raises(tamto_sdk.errors.NotFound):
        await tamto_client.streams.describe(name)


async def test_dead_letter_stream_must_differ_from_the_stream(
    tamto_client: tamto_sdk.Client,
) -> None:
    name = unique("self")
    with pytest.raises(
        tamto_sdk.errors.InvalidArgument, match="must differ from the stream itself"
    ):
        await tamto_client.streams.ensure(name, config=StreamConfig(dead_letter_stream=name))


@pytest.mark.parametrize("name", ["", "with space", "_under", "a/b", "x" * 129])
async def test_illegal_stream_names_are_refused(tamto_client: tamto_sdk.Client, name: str) -> None:
    with pytest.raises(tamto_sdk.errors.InvalidArgument, match="stream name"):
        await tamto_client.streams.ensure(name)


async def test_raw_requests_zero_means_default_and_unknown_enums_are_refused(
    tamto_cluster: TestCluster,
) -> None:
    async with grpc.aio.insecure_channel(tamto_cluster.gateway_address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        auth = await auth_metadata(stub, tamto_cluster.credential)
        name = unique("raw")
        created = await stub.EnsureStream(
            gateway_pb2.EnsureStreamRequest(name=name, config=messages_pb2.StreamConfig()),
            metadata=auth,
        )
        config = created.stream.config
        assert created.created
        assert config.partitions == 1
        assert config.dedup_window_ms == 120_000
        assert config.ack_timeout_ms == 30_000
        assert config.durability == messages_pb2.DURABILITY_GROUP_COMMIT
        assert config.retention_policy == messages_pb2.RETENTION_POLICY_LIMITS
        assert config.dead_letter_stream == f"{name}.dlq"
        assert config.kind == messages_pb2.STREAM_KIND_PERSISTENT

        for bad, message in (
            (messages_pb2.StreamConfig(durability=7), "durability must be"),  # type: ignore[arg-type]
            (messages_pb2.StreamConfig(kind=9), "kind must be"),  # type: ignore[arg-type]
            (
                messages_pb2.StreamConfig(retention_policy=5),  # type: ignore[arg-type]
                "retention_policy must be",
            ),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.EnsureStream(
                    gateway_pb2.EnsureStreamRequest(name=unique("raw"), config=bad), metadata=auth
                )
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert message in (info.value.details() or "")

        # A deleted stream takes no more messages.
        assert (
            await stub.DeleteStream(gateway_pb2.DeleteStreamRequest(name=name), metadata=auth)
        ).deleted
        batch = encode_batch(BatchColumns([b"late"], [None], [None], [None], [None]))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Publish(
                gateway_pb2.PublishRequest(
                    stream=name,
                    partition=0,
                    batch=messages_pb2.RecordBatch(arrow_ipc=batch, count=1),
                ),
                metadata=auth,
            )
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND


async def test_delete(tamto_client: tamto_sdk.Client, nats_url: str) -> None:
    name = unique("gone")
    await tamto_client.streams.ensure(name, partitions=2, config=FULL)
    bus = await nats.connect(nats_url)
    try:
        events = await bus.subscribe("tamto.events.stream.deleted")
        await bus.flush()
        assert await tamto_client.streams.delete(name) is True
        msg = await events.next_msg(timeout=10)
        assert json.loads(msg.data) == {"stream": name, "partitions": 2}
    finally:
        await bus.close()
    with pytest.raises(tamto_sdk.errors.NotFound) as info:
        await tamto_client.streams.describe(name)
    assert info.value.code == "NOT_FOUND"
    assert name not in [s.name for s in await tamto_client.streams.list()]
    assert await tamto_client.streams.delete(name) is False
    assert await tamto_client.streams.delete(unique("never")) is False
    # The name is taken until storage removed the old stream's data (the test clusters'
    # grace period is 1 s), then it can be used again, with another partition count.
    with pytest.raises(tamto_sdk.errors.FailedPrecondition, match="being removed"):
        await tamto_client.streams.ensure(name, partitions=5)

    async def created_again() -> bool:
        try:
            again = await tamto_client.streams.ensure(name, partitions=5)
        except tamto_sdk.errors.FailedPrecondition:
            return False
        assert again.created
        return again.stream.partitions == 5

    await eventually(created_again, 60, "the name free again", interval_s=0.3)


# -- the CLI ------------------------------------------------------------------------


def cli(cluster: TestCluster, *args: str) -> subprocess.CompletedProcess[str]:
    """`tamto stream ARGS`."""
    return tamto(cluster, "stream", *args)


def test_cli_stream_commands(tamto_cluster: TestCluster) -> None:
    name = unique("cli")
    flags = [
        "--partitions", "2", "--retention-ms", "60000", "--retention-bytes", "1048576",
        "--retention-policy", "interest", "--dedup-window-ms", "30000",
        "--ack-timeout-ms", "4000", "--max-deliveries", "3",
        "--max-lag", "100", "--dead-letter-stream", f"{name}-dead", "--durability", "interval",
        "--fsync-interval-ms", "15", "--replication-factor", "1", "--ack-quorum", "1",
    ]  # fmt: skip
    check_cli_ensure_reports_what_it_did(tamto_cluster, name, flags)
    check_cli_describe_and_list(tamto_cluster, name)
    check_cli_refusals(tamto_cluster, name)
    check_cli_delete(tamto_cluster, name)


def check_cli_ensure_reports_what_it_did(cluster: TestCluster, name: str, flags: list[str]) -> None:
    """`stream ensure` creates, finds the same, shows a difference, and overwrites it."""
    created = cli(cluster, "ensure", name, *flags)
    assert created.returncode == 0, created.stderr
    assert created.stdout.splitlines() == [f"{name}: created, 2 partitions"]

    same = cli(cluster, "ensure", name, *flags)
    assert same.stdout.splitlines() == [f"{name}: exists, 2 partitions"]

    differs = cli(cluster, "ensure", name, *flags, "--ack-timeout-ms", "9000")
    assert differs.returncode == 0, differs.stderr
    assert differs.stdout.splitlines() == [
        f"{name}: exists, 2 partitions",
        "  differs: ack_timeout_ms: stored 4000, requested 9000",
    ]
    changed = cli(cluster, "ensure", name, *flags, "--ack-timeout-ms", "9000", "--overwrite")
    assert changed.stdout.splitlines() == [
        f"{name}: changed, 2 partitions",
        "  changed: ack_timeout_ms: stored 4000, requested 9000",
    ]


def check_cli_describe_and_list(cluster: TestCluster, name: str) -> None:
    """`stream describe` (JSON and table) and `stream list` show the stream as ensured."""
    described = cli(cluster, "describe", name, "--json")
    assert described.returncode == 0, described.stderr
    definition = json.loads(described.stdout)
    # Beside the definition, each partition's stats: nothing published yet.
    stats = definition.pop("stats")
    assert [(p["partition"], p["messages"], p["end_offset"]) for p in stats] == [
        (0, 0, 0),
        (1, 0, 0),
    ]
    assert all(p["owner"] for p in stats), stats
    assert definition == {
        "name": name,
        "partitions": 2,
        "kind": "persistent",
        "retention_ms": 60000,
        "retention_bytes": 1048576,
        "retention_policy": "interest",
        "dedup_window_ms": 30000,
        "ack_timeout_ms": 9000,
        "max_deliveries": 3,
        "max_lag": 100,
        "dead_letter_stream": f"{name}-dead",
        "durability": "interval",
        "fsync_interval_ms": 15,
        "replication_factor": 1,
        "ack_quorum": 1,
    }
    table = cli(cluster, "describe", name)
    assert table.returncode == 0, table.stderr
    assert "ack_timeout_ms" in table.stdout
    assert "9000" in table.stdout
    assert "interval" in table.stdout

    listed = cli(cluster, "list")
    assert f"{name}\t2\tpersistent" in listed.stdout.splitlines()
    listed_json = cli(cluster, "list", "--json")
    assert any(s["name"] == name and s["max_lag"] == 100 for s in json.loads(listed_json.stdout))


def check_cli_refusals(cluster: TestCluster, name: str) -> None:
    """`stream ensure` refuses a partition change, invalid settings and an unknown mode."""
    refused = cli(cluster, "ensure", name, "--partitions", "4", "--overwrite")
    assert refused.returncode == 8  # FAILED_PRECONDITION
    assert "partition count is fixed" in refused.stderr

    invalid = cli(cluster, "ensure", unique("cli"), "--ack-timeout-ms", "1")
    assert invalid.returncode == 3  # INVALID_ARGUMENT
    assert "ack_timeout_ms must be between 100 and 86400000, got 1" in invalid.stderr
    too_many = cli(cluster, "ensure", unique("cli"), "--replication-factor", "2")
    assert too_many.returncode == 3
    assert "replication_factor 2 is more than the 1 live storage node(s)" in too_many.stderr

    bad_mode = cli(cluster, "ensure", unique("cli"), "--durability", "sometimes")
    assert bad_mode.returncode == 2
    assert "--durability must be 'group' or 'interval'" in bad_mode.stderr


def check_cli_delete(cluster: TestCluster, name: str) -> None:
    """`stream delete` deletes once; then neither delete nor describe finds it."""
    deleted = cli(cluster, "delete", name)
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.splitlines() == [f"{name}: deleted"]
    missing = cli(cluster, "delete", name)
    assert missing.returncode == 4  # NOT_FOUND
    assert "does not exist" in missing.stderr
    gone = cli(cluster, "describe", name)
    assert gone.returncode == 4
    assert "does not exist" in gone.stderr
