"""Every `tamto` command given ``--json`` prints JSON a script can parse, run against
a real system: each command of the tree is run here, or by the CLI's unit test
(those that need no system), or is named below with why it is not.

libs/cli/tests/test_cli_every_command_json.py checks that each command takes
``--json``; this checks what they print.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

import tamto_sdk
import tamto_sdk.stream_config
from tamto_cli.main import app
from tamto_common.dev_credential import load_dev_credential
from tamto_testing.cluster import TestCluster

from .test_cli_pub_sub import tamto
from .test_launcher import Launcher

pytestmark = pytest.mark.e2e

#: Run with --json by the CLI's unit test: they need no running system.
WITHOUT_A_SYSTEM = {
    "context add",
    "context use",
    "context remove",
    "context list",
    "storage verify",
    "storage repair",
}
#: Not run here, and why.
NOT_RUN = {
    "up": "starts a system of its own: test_up_prints_how_to_reach_it_as_json",
    "bench": "a benchmark campaign",
    "chaos": "a fault-injection campaign",
    "node drain": "draining the only router is refused (test_planned_moves drains)",
    "sub": "consumes; run here as `sub STREAM -s NAME`, its path is the group's",
}


def command_paths() -> Iterator[str]:
    def walk(command: Any, path: list[str]) -> Iterator[str]:
        children = getattr(command, "commands", None)
        if children is None:
            yield " ".join(path)
            return
        for name, child in children.items():
            yield from walk(child, [*path, name])

    yield from walk(typer.main.get_command(app), [])


class Runner:
    """Runs `tamto ... --json`, parses what it prints, and notes which command ran."""

    def __init__(self, cluster: TestCluster) -> None:
        self.cluster = cluster
        self.ran: set[str] = set()

    async def __call__(self, path: str, *args: str, lines: bool = False) -> Any:
        argv = [*path.split(), *args, "--json"]
        done: subprocess.CompletedProcess[str] = await asyncio.to_thread(tamto, self.cluster, *argv)
        assert done.returncode == 0, (argv, done.stderr)
        self.ran.add(path)
        if lines:
            return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        return json.loads(done.stdout)


async def test_every_command_prints_json_that_parses(
    tamto_client: tamto_sdk.Client, tamto_cluster: TestCluster
) -> None:
    run = Runner(tamto_cluster)
    stream, user, role = (f"{p}-{uuid.uuid4().hex[:8]}" for p in ("json", "u", "r"))

    members = (await run("status", "--etcd", tamto_cluster.infra.etcd_endpoint))["members"]
    assert any(m["service"] == "gateway" for m in members)
    await check_stream_commands(run, stream)
    await check_subscription_commands(run, stream)
    await check_auth_commands(run, stream, user, role)

    targets = tamto_cluster.workdir / "targets.json"
    written = await run("scrape-targets", str(targets), "--etcd", tamto_cluster.infra.etcd_endpoint)
    assert written["targets"] >= 4
    assert json.loads(targets.read_text())

    etcd = tamto_cluster.infra.etcd_endpoint
    view = await run("top", "--once", "--interval", "0.5", "--etcd", etcd)
    assert isinstance(view, dict)

    await check_function_commands(run, tamto_cluster, stream)

    router = tamto_cluster.instance_id("router")
    assert (await run("partition move", f"{stream}/0", "--to", router))["router"] == router
    assert router not in (await run("node undrain", router))["drained_nodes"]

    await check_topic_commands(run, tamto_client, stream)
    assert (await run("stream delete", stream))["deleted"] is True

    left = set(command_paths()) - run.ran - WITHOUT_A_SYSTEM - set(NOT_RUN)
    assert left == set(), f"commands never run with --json: {sorted(left)}"


async def check_stream_commands(run: Runner, stream: str) -> None:
    """Make `stream`, publish a, b, c to it and consume the first on the subscription
    "ops"."""
    assert (await run("stream ensure", stream))["created"] is True
    assert stream in {s["name"] for s in await run("stream list")}
    assert (await run("stream describe", stream))["name"] == stream
    published = await run("pub", stream, "a", "b", "c", lines=True)
    assert [p["payload"] for p in published] == ["a", "b", "c"]
    got = await run("stream get", stream, "-p", "0", "--offset", "0", "--count", "2", lines=True)
    assert [m["offset"] for m in got] == [0, 1]
    consumed = await run("sub", stream, "-s", "ops", "--count", "1", lines=True)
    assert [m["payload"] for m in consumed] == ["a"]


async def check_subscription_commands(run: Runner, stream: str) -> None:
    """The subscription "ops" (one of three consumed), looked at, moved and deleted."""
    assert await run("subscription list", stream) == ["ops"]
    assert (await run("subscription overview", stream))[0]["subscription"] == "ops"
    assert (await run("subscription describe", stream, "ops"))["backlog_messages"] == 2
    assert [m["offset"] for m in await run("subscription peek", stream, "ops", lines=True)] == [1]
    planned = await run("subscription seek", stream, "ops", "--to", "earliest", "--dry-run")
    assert planned["partitions"][0]["seek_to"] == 0
    assert (await run("subscription skip", stream, "ops", "--count", "1"))["backlog_messages"] == 1
    assert (await run("subscription delete", stream, "ops"))["deleted"] is True


async def check_auth_commands(run: Runner, stream: str, user: str, role: str) -> None:
    """A user and its keys, a role on `stream` and its binding, tokens and signing keys."""
    assert (await run("auth user create", user))["identity"] == user
    assert user in {u["name"] for u in await run("auth user list")}
    key = (await run("auth user add-key", user))["key_id"]
    key = (await run("auth user rotate-key", key))["key_id"]
    assert (await run("auth user disable-key", key))["disabled"] is True
    assert (await run("auth user delete-key", key))["deleted"] is True
    assert (await run("auth user disable", user))["disabled"] is True
    assert (await run("auth user enable", user))["disabled"] is False
    assert (await run("auth role put", role, "--grant", f"consume:{stream}"))["name"] == role
    assert role in {r["name"] for r in await run("auth role list")}
    assert (await run("auth bind", user, role))["changed"] is True
    assert (await run("auth bindings"))[user] == [role]
    assert (await run("auth role delete", role))["deleted"] is True
    assert (await run("auth token"))["token"]
    assert "subject" in await run("auth whoami")
    assert (await run("auth rotate-signing-key"))["key_id"]


async def check_function_commands(run: Runner, cluster: TestCluster, stream: str) -> None:
    """A function from `stream` to a new output stream, through its whole life."""
    function, spec = f"{stream}-fn", cluster.workdir / f"{stream}-fn.json"
    output = f"{stream}-out"
    assert (await run("stream ensure", output))["created"] is True
    steps = [{"filter": "true"}]
    body = {"name": function, "inputs": [stream], "output": output, "identity": "dev"}
    spec.write_text(json.dumps({**body, "code": {"steps": steps}}))
    assert (await run("function deploy", str(spec)))["version"] == 1
    assert function in {f["name"] for f in await run("function list")}
    assert (await run("function describe", function))["name"] == function
    assert "instances" in await run("function status", function)
    assert (await run("function pause", function))["state"] == "paused"
    assert (await run("function resume", function))["state"] == "running"
    assert (await run("function update", str(spec)))["version"] == 2
    assert (await run("function delete", function))["deleted"] is True


async def check_topic_commands(run: Runner, client: tamto_sdk.Client, stream: str) -> None:
    """Publish to a topic of an ephemeral stream, and a request answered on one."""
    topics = f"{stream}-topics"
    await client.streams.ensure(topics, kind=tamto_sdk.stream_config.StreamKind.EPHEMERAL)
    sent = await run("pub", topics, "--topic", "a.b", "x")
    assert sent == {"stream": topics, "topic": "a.b", "published": 1}
    async with client.reply_handler(topics, lambda m: m.payload.upper(), match="ask"):
        (reply,) = await run("request", topics, "hi", "--topic", "ask", lines=True)
    assert reply["payload"] == "HI"


def test_up_prints_how_to_reach_it_as_json(tmp_path: Path) -> None:
    """`tamto up --json`: its logs on stderr, one JSON object on stdout once it is up."""
    launcher = Launcher(tmp_path / "data", tmp_path / "up.log")
    result = launcher.run("--once", "--quiet", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Tamto is up" in result.stderr
    ready = json.loads(result.stdout)
    assert ready["gateway"] == f"tamto://127.0.0.1:{launcher.gateway}"
    assert ready["gateways"] == [ready["gateway"]]
    assert ready["api_key"] == load_dev_credential(tmp_path / "data")
    assert (ready["data_dir"], ready["ca_file"]) == (str((tmp_path / "data").resolve()), None)
