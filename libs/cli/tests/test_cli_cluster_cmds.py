"""`tamto partition move` and `tamto node drain|undrain`: what is checked before any call,
and `tamto status` noting a drained router."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from tamto_cli import connect as connect_module
from tamto_cli.cluster_cmds import parse_partition
from tamto_cli.main import app
from tamto_cli.status import fetch_notes
from tamto_common.membership import Member


def test_a_partition_is_stream_slash_number() -> None:
    assert parse_partition("orders/3") == ("orders", 3)
    for bad in ("orders", "orders/", "/3", "orders/x", "orders/-1"):
        result = CliRunner().invoke(app, ["partition", "move", bad, "--to", "router-1"])
        assert result.exit_code == 2, bad
        assert "STREAM/P" in result.output, result.output


def test_the_verbs_are_reachable() -> None:
    for args in (["partition", "move", "--help"], ["node", "drain", "--help"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0
    assert "--to" in CliRunner().invoke(app, ["partition", "move", "--help"]).output
    undrain = CliRunner().invoke(app, ["node", "undrain", "--help"])
    assert "own partitions again" in undrain.output


class _Cluster:
    """The SDK's `client.cluster` as drain and undrain call it: the drained set."""

    def __init__(self) -> None:
        self.drained = {"router-9"}

    async def drain(self, node: str) -> list[str]:
        self.drained.add(node)
        return sorted(self.drained)

    async def undrain(self, node: str) -> list[str]:
        self.drained.discard(node)
        return sorted(self.drained)


def test_drain_and_undrain_print_the_drained_routers(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = _Cluster()

    class Client:
        async def __aenter__(self) -> Any:
            return SimpleNamespace(cluster=cluster)

        async def __aexit__(self, *exc: object) -> None:
            pass

    async def connect(*args: object) -> Client:
        return Client()

    monkeypatch.setattr(connect_module, "connect_client", connect)

    def node(*args: str) -> str:
        result = CliRunner().invoke(app, ["node", *args])
        assert result.exit_code == 0, result.output
        return result.output

    assert node("drain", "router-2") == "router-2: drained (drained routers: router-2, router-9)\n"
    assert json.loads(node("undrain", "router-2", "--json")) == {
        "node": "router-2",
        "drained": False,
        "drained_nodes": ["router-9"],
    }
    assert json.loads(node("drain", "router-2", "--json")) == {
        "node": "router-2",
        "drained": True,
        "drained_nodes": ["router-2", "router-9"],
    }
    node("undrain", "router-9")
    assert node("undrain", "router-2") == "router-2: undrained (drained routers: none)\n"


async def test_status_notes_a_drained_router_whatever_its_health() -> None:
    router = Member("router", "router-2", "127.0.0.1:1", "127.0.0.1:2", "test", 1, 0.0)
    storage = Member("storage", "storage-2", "127.0.0.1:3", "127.0.0.1:4", "test", 1, 0.0)
    rows = [(router, "UNREACHABLE"), (storage, "UNREACHABLE")]
    notes = await fetch_notes(rows, frozenset({"router-2", "storage-2"}))
    # (A storage node that does not answer is noted so, drained or not.)
    hung = {storage.key: "not answering (hung?)"}
    assert notes == {router.key: "drained (tamto node undrain)", **hung}
    assert await fetch_notes(rows) == hung
