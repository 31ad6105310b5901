"""The CLI for scripts: `tamto pub --header/--json`, `tamto sub --json/--format`."""

from __future__ import annotations

import json
import uuid

import pytest

from tamto_testing.cluster import TestCluster

from .test_cli_pub_sub import tamto

pytestmark = pytest.mark.e2e


def test_pub_headers_and_json_reach_sub_json_and_hex(tamto_cluster: TestCluster) -> None:
    stream = f"cli-{uuid.uuid4().hex[:8]}"
    assert tamto(tamto_cluster, "stream", "ensure", stream).returncode == 0
    published = tamto(
        tamto_cluster, "pub", stream, "--json", "-H", "trace=t1", "-H", "a=b=c", '{"n":1}', "hi"
    )
    assert published.returncode == 0, published.stderr
    assert [json.loads(line) for line in published.stdout.splitlines()] == [
        {"stream": stream, "partition": 0, "offset": 0, "payload": '{"n":1}'},
        {"stream": stream, "partition": 0, "offset": 1, "payload": "hi"},
    ]

    consumed = tamto(
        tamto_cluster, "sub", stream, "-s", "script", "--count", "2", "--json", "--format", "json"
    )
    assert consumed.returncode == 0, consumed.stderr
    first, second = (json.loads(line) for line in consumed.stdout.splitlines())
    assert first["payload"] == {"n": 1}
    assert first["headers"] == {"trace": "t1", "a": "b=c"}
    assert (first["offset"], first["delivery_count"]) == (0, 1)
    assert second["payload"] == "hi"  # not JSON: shown as text

    hexed = tamto(tamto_cluster, "sub", stream, "-s", "hex", "--count", "1", "--format", "hex")
    assert hexed.returncode == 0, hexed.stderr
    first_hex = b'{"n":1}'.hex()
    assert hexed.stdout.splitlines() == [f"{stream}/0@0\t\t{first_hex}"]


def test_pub_refuses_a_malformed_header_with_exit_code_2(tamto_cluster: TestCluster) -> None:
    refused = tamto(tamto_cluster, "pub", "anything", "-H", "novalue", "x")
    assert refused.returncode == 2
    assert "KEY=VALUE" in refused.stderr


def test_sub_refuses_a_payload_format_without_a_subscription(tamto_cluster: TestCluster) -> None:
    """`--format` shapes a durable subscription's payloads; `--json` is taken either way
    (an ephemeral `sub` prints a JSON object a message)."""
    refused = tamto(tamto_cluster, "sub", "some-ephemeral-stream", "--format", "hex")
    assert refused.returncode == 2
    assert "--subscription" in refused.stderr
