"""The functions admin API end to end: SDK and CLI against a real gateway, auth and a
processing node. Deploy, update (a rolling version), pause, resume, delete and status
are each seen to act on the running function; a bad spec is refused at deploy naming
the problem."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aetcd
import pytest
from tamto_functions.specs import SpecStore

import tamto_sdk
from tamto_sdk.security import Grant, IdentityKind, Permission
from tamto_testing.cluster import TestCluster
from tamto_testing.waiting import eventually
from tests.processing_nodes import processing_node

from .test_cli_pub_sub import tamto

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def processing(tamto_cluster: TestCluster) -> Iterator[TestCluster]:
    with processing_node(tamto_cluster) as cluster:
        yield cluster


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def filter_spec(name: str, source: str, output: str, condition: str) -> dict[str, Any]:
    return {
        "name": name,
        "inputs": [{"stream": source, "subscription": "key_shared"}],
        "output": output,
        "code": {
            "steps": [
                {"parse_json": {"fields": {"amount": "int"}}},
                {"filter": condition},
                {"project": ["amount"]},
            ]
        },
        "identity": "dev",
    }


async def publish_amounts(client: tamto_sdk.Client, stream: str, amounts: range) -> None:
    async with client.producer(stream) as producer:
        await (await producer.send_batch([json.dumps({"amount": a}).encode() for a in amounts]))


async def amounts_read(consumer: tamto_sdk.Consumer, expected: int) -> list[int]:
    seen: list[int] = []

    async def enough() -> bool:
        batch = await consumer.receive_batch(1000, timeout_s=0.5)
        seen.extend(json.loads(m.payload)["amount"] for m in batch)
        for message in batch:
            consumer.ack(message)
        return len(seen) >= expected

    await eventually(enough, 60, f"{expected} results")
    return sorted(seen)


async def test_deploy_update_pause_resume_delete_and_status_through_the_sdk(
    processing: TestCluster, tamto_client: tamto_sdk.Client, etcd_client: aetcd.Client
) -> None:
    functions = tamto_client.functions
    source, output, name = unique("in"), unique("out"), unique("fn")
    await tamto_client.streams.ensure(source, partitions=2)
    await tamto_client.streams.ensure(output, partitions=1)

    deployed = await functions.deploy(filter_spec(name, source, output, "amount > 0"))
    assert (deployed.version, deployed.state, deployed.identity) == (1, "running", "dev")
    assert deployed.api_key_id
    assert name in [f.name for f in await functions.list()]

    async with tamto_client.consumer(output, unique("check")) as results:
        await publish_amounts(tamto_client, source, range(-5, 15))
        assert await amounts_read(results, 14) == list(range(1, 15))

        async def counted() -> bool:
            status = await functions.status(name)
            return status.processed == 20 and status.backlog_messages == 0

        await eventually(counted, 30, "20 processed and no backlog in the status")
        status = await functions.status(name)
        ((instance),) = status.instances
        assert instance.node.startswith("processing")
        assert (instance.instance, instance.published, instance.errors) == (f"{name}#0", 14, 0)
        assert instance.rate > 0
        assert [lag.stream for lag in status.lag] == [source]

        updated = await functions.update(filter_spec(name, source, output, "amount > 100"))
        assert updated.version == 2

        async def rolled() -> bool:
            found = (await functions.status(name)).instances
            return [i.version for i in found] == [2]

        await eventually(rolled, 30, "the instance on version 2")
        await publish_amounts(tamto_client, source, range(95, 105))
        assert await amounts_read(results, 4) == [101, 102, 103, 104]

        assert (await functions.pause(name)).state == "paused"

        async def stopped() -> bool:
            return (await functions.status(name)).instances == ()

        await eventually(stopped, 30, "no instance of the paused function")
        await publish_amounts(tamto_client, source, range(200, 210))

        async def waiting() -> bool:
            return (await functions.status(name)).backlog_messages == 10

        await eventually(waiting, 30, "the 10 messages waiting while paused")
        assert (await functions.resume(name)).state == "running"
        assert await amounts_read(results, 10) == list(range(200, 210))

    assert await functions.delete(name) is True
    assert name not in [f.name for f in await functions.list()]
    with pytest.raises(tamto_sdk.errors.NotFound, match=name):
        await functions.status(name)
    store = SpecStore(etcd_client)
    assert (await store.api_key(name), await store.statuses(name)) == (None, {})
    with pytest.raises(tamto_sdk.errors.NotFound):  # the function's API key went with it
        await tamto_client.security.delete_api_key(deployed.api_key_id)
    assert await functions.delete(name) is False


async def test_a_bad_spec_is_refused_at_deploy_naming_the_problem(
    processing: TestCluster, tamto_client: tamto_sdk.Client
) -> None:
    functions = tamto_client.functions
    source, output = unique("in"), unique("out")
    await tamto_client.streams.ensure(source)
    await tamto_client.streams.ensure(output)
    spec = filter_spec(unique("fn"), source, output, "amount >")
    with pytest.raises(tamto_sdk.errors.InvalidArgument, match=r"code.steps\[1\].*'amount >'"):
        await functions.deploy(spec)
    missing = unique("nowhere")
    with pytest.raises(
        tamto_sdk.errors.NotFound, match=f"output: stream '{missing}' does not exist"
    ):
        await functions.deploy(filter_spec(unique("fn"), source, missing, "true"))
    with pytest.raises(tamto_sdk.errors.NotFound, match=f"inputs: stream '{missing}'"):
        await functions.deploy(filter_spec(unique("fn"), missing, output, "true"))
    uploaded = {"python": {"entry": "mod:run", "source": "def other(p):\n    return p\n"}}
    with pytest.raises(tamto_sdk.errors.InvalidArgument, match=r"code.entry: .* defines no 'run'"):
        await functions.deploy({**spec, "code": uploaded})
    broken = {"python": {"entry": "mod:run", "source": "def run(p)\n    return p\n"}}
    with pytest.raises(tamto_sdk.errors.InvalidArgument, match=r"code\.source: line 1"):
        await functions.deploy({**spec, "code": broken})
    with pytest.raises(tamto_sdk.errors.InvalidArgument, match="parallelism"):
        await functions.deploy(
            {**filter_spec(unique("fn"), source, output, "true"), "parallelism": 0}
        )
    assert spec["name"] not in [f.name for f in await functions.list()]


async def test_an_unknown_import_path_shows_in_the_status(
    processing: TestCluster, tamto_client: tamto_sdk.Client
) -> None:
    """Found by import path in the processing nodes' environment, so checked there."""
    source, output, name = unique("in"), unique("out"), unique("fn")
    await tamto_client.streams.ensure(source)
    await tamto_client.streams.ensure(output)
    spec = {**filter_spec(name, source, output, "true")}
    spec["code"] = {"python": {"entry": "no_such_module_anywhere:run"}}
    await tamto_client.functions.deploy(spec)

    async def reported() -> bool:
        found = (await tamto_client.functions.status(name)).instances
        return any("cannot import 'no_such_module_anywhere'" in i.last_error for i in found)

    await eventually(reported, 30, "the import failure in the status")
    await tamto_client.functions.delete(name)


async def test_only_an_admin_deploys(
    processing: TestCluster, tamto_client: tamto_sdk.Client
) -> None:
    who, source = unique("reader"), unique("in")
    await tamto_client.streams.ensure(source)
    security = tamto_client.security
    await security.create_identity(who, IdentityKind.SERVICE)
    await security.put_role(who, [Grant(Permission.CONSUME, "*")])
    await security.bind(who, who)
    key = (await security.create_api_key(who)).api_key
    async with await tamto_sdk.connect(processing.url, api_key=key) as reader:
        with pytest.raises(tamto_sdk.errors.PermissionDenied):
            await reader.functions.deploy(filter_spec(unique("fn"), source, source + "x", "true"))
        with pytest.raises(tamto_sdk.errors.PermissionDenied):
            await reader.functions.list()


async def test_the_cli_deploys_a_yaml_spec_and_steers_it(
    processing: TestCluster, tmp_path: Path
) -> None:
    source, output, name = unique("in"), unique("out"), unique("fn")
    for stream in (source, output):
        assert tamto(processing, "stream", "ensure", stream).returncode == 0
    spec = tmp_path / "fn.yaml"
    spec.write_text(
        f"name: {name}\ninputs: [{source}]\noutput: {output}\nidentity: dev\n"
        'code:\n  steps:\n    - filter: "payload IS NOT NULL"\n'
    )
    deployed = tamto(processing, "function", "deploy", str(spec), "--json")
    assert deployed.returncode == 0, deployed.stderr
    assert json.loads(deployed.stdout)["version"] == 1
    again = tamto(processing, "function", "deploy", str(spec))
    assert again.returncode == 5  # ALREADY_EXISTS
    assert name in again.stderr
    assert tamto(processing, "pub", source, "a", "b", "c").returncode == 0

    def processed() -> bool:
        shown = tamto(processing, "function", "status", name, "--json")
        assert shown.returncode == 0, shown.stderr
        instances = json.loads(shown.stdout)["instances"]
        return sum(int(i["processed"]) for i in instances) == 3

    await eventually(processed, 60, "3 processed in `tamto function status`", interval_s=0.3)
    table = tamto(processing, "function", "status", name)
    assert table.returncode == 0, table.stderr
    assert f"{name}#0" in table.stdout
    assert f"lag on {source}: 0 messages" in table.stdout

    listed = tamto(processing, "function", "list", "--json")
    (mine,) = [f for f in json.loads(listed.stdout) if f["name"] == name]
    spec_json = tmp_path / "fn.json"
    spec_json.write_text(json.dumps({**mine["spec"], "parallelism": 2}))
    updated = tamto(processing, "function", "update", str(spec_json), "--json")
    assert updated.returncode == 0, updated.stderr
    shown = json.loads(updated.stdout)
    assert (shown["version"], shown["spec"]["parallelism"]) == (2, 2)
    paused = tamto(processing, "function", "pause", name)
    assert (paused.returncode, paused.stdout.strip()) == (0, f"{name}: paused (version 2, paused)")
    resumed = tamto(processing, "function", "resume", name, "--json")
    assert json.loads(resumed.stdout)["state"] == "running"
    described = tamto(processing, "function", "describe", name, "--json")
    assert json.loads(described.stdout)["spec"]["inputs"] == [
        {"stream": source, "subscription": "shared"}
    ]
    deleted = tamto(processing, "function", "delete", name, "--json")
    assert json.loads(deleted.stdout) == {"name": name, "deleted": True}
    gone = tamto(processing, "function", "describe", name)
    assert gone.returncode == 4  # NOT_FOUND
    assert f"function '{name}' is not deployed" in gone.stderr

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(filter_spec(unique("fn"), source, output, "amount >")))
    refused = tamto(processing, "function", "deploy", str(bad))
    assert refused.returncode == 3  # INVALID_ARGUMENT
    assert "invalid expression 'amount >'" in refused.stderr
