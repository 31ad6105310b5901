"""`tamto pub` and `tamto sub` against a running system."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from tamto_testing.cluster import TestCluster

from ..programs import run_to_end

pytestmark = pytest.mark.e2e


def tamto(
    cluster: TestCluster, *args: str, stdin: str | None = None, api_key: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`tamto ARGS` against `cluster`, with its credential (or `api_key`), 200 columns
    wide, `stdin` on its standard input."""
    env = {"TAMTO_URL": cluster.url, "TAMTO_API_KEY": api_key or cluster.credential}
    return run_to_end(
        [sys.executable, "-m", "tamto_cli", *args], env={**env, "COLUMNS": "200"}, stdin=stdin
    )


def test_pub_then_sub_with_a_start_offset_and_a_type(tamto_cluster: TestCluster) -> None:
    stream = f"cli-{uuid.uuid4().hex[:8]}"
    assert tamto(tamto_cluster, "stream", "ensure", stream).returncode == 0
    published = tamto(tamto_cluster, "pub", stream, "--key", "k", stdin="a\nb\nc\n")
    assert published.returncode == 0, published.stderr
    assert [line.split("\t")[0] for line in published.stdout.splitlines()] == [
        f"{stream}/0@0",
        f"{stream}/0@1",
        f"{stream}/0@2",
    ]
    consumed = tamto(
        tamto_cluster,
        "sub",
        stream,
        "-s",
        "from-one",
        "--type",
        "shared",
        "--start",
        "offset:1",
        "--count",
        "2",
    )
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == [f"{stream}/0@1\tk\tb", f"{stream}/0@2\tk\tc"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--type", "broadcast"],
            "--type must be exclusive, failover, shared, key-shared or multicast",
        ),
        (["--start", "yesterday"], "--start must be earliest, latest, offset:N or time:ISO"),
    ],
)
def test_sub_refuses_bad_options_with_one_line(
    tamto_cluster: TestCluster, args: list[str], message: str
) -> None:
    result = tamto(tamto_cluster, "sub", "any", "-s", "x", *args)
    assert result.returncode == 2
    assert message in result.stderr


def test_pub_to_a_missing_stream_is_one_clear_line(tamto_cluster: TestCluster) -> None:
    result = tamto(tamto_cluster, "pub", f"missing-{uuid.uuid4().hex[:6]}", "x")
    assert result.returncode == 4  # NOT_FOUND
    assert "does not exist" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
