"""`tamto sub list|describe|seek|skip|delete`, `tamto stream describe` stats and
`tamto stream get`, run as an operator would, against a real system."""

from __future__ import annotations

import json
import uuid

import pytest

from tamto_testing.cluster import TestCluster

from .test_cli_pub_sub import tamto

pytestmark = pytest.mark.e2e


def test_operator_verbs_show_and_move_a_subscription(tamto_cluster: TestCluster) -> None:
    stream = f"cli-admin-{uuid.uuid4().hex[:8]}"
    assert tamto(tamto_cluster, "stream", "ensure", stream).returncode == 0
    payloads = [f'{{"n":{i}}}' for i in range(5)]
    assert tamto(tamto_cluster, "pub", stream, *payloads).returncode == 0
    consumed = tamto(tamto_cluster, "sub", stream, "-s", "ops", "--count", "2")
    assert consumed.returncode == 0, consumed.stderr

    listed = tamto(tamto_cluster, "sub", "list", stream, "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == ["ops"]

    described = tamto(tamto_cluster, "sub", "describe", stream, "ops", "--json")
    assert described.returncode == 0, described.stderr
    info = json.loads(described.stdout)
    assert (info["subscription"], info["backlog_messages"]) == ("ops", 3)
    (part,) = info["partitions"]
    assert (part["ack_floor"], part["end_offset"], part["consumers"]) == (2, 5, [])
    table = tamto(tamto_cluster, "sub", "describe", stream, "ops")
    assert table.returncode == 0, table.stderr
    assert "backlog 3 messages" in table.stdout

    sought = tamto(tamto_cluster, "sub", "seek", stream, "ops", "--offset", "0=1", "--json")
    assert sought.returncode == 0, sought.stderr
    assert json.loads(sought.stdout)["partitions"][0]["ack_floor"] == 1
    beyond = tamto(tamto_cluster, "sub", "seek", stream, "ops", "--to", "offset:99")
    assert beyond.returncode == 9  # OUT_OF_RANGE
    assert "[0, 5]" in beyond.stderr

    peeked = tamto(
        tamto_cluster,
        "stream",
        "get",
        stream,
        "--partition",
        "0",
        "--offset",
        "3",
        "--count",
        "2",
        "--json",
        "--format",
        "json",
    )
    assert peeked.returncode == 0, peeked.stderr
    rows = [json.loads(line) for line in peeked.stdout.splitlines()]
    assert [(r["offset"], r["payload"]) for r in rows] == [(3, {"n": 3}), (4, {"n": 4})]

    stats = tamto(tamto_cluster, "stream", "describe", stream, "--json")
    assert stats.returncode == 0, stats.stderr
    (partition,) = json.loads(stats.stdout)["stats"]
    assert (partition["start_offset"], partition["end_offset"], partition["messages"]) == (0, 5, 5)
    assert partition["bytes_on_disk"] > 0

    assert tamto(tamto_cluster, "sub", "delete", stream, "ops").returncode == 0
    gone = tamto(tamto_cluster, "sub", "describe", stream, "ops")
    assert gone.returncode == 4  # NOT_FOUND
    assert "'ops'" in gone.stderr
