"""`tamto partition move` and `tamto node drain|undrain`: what is checked before any call."""

from __future__ import annotations

from typer.testing import CliRunner

from tamto_cli.cluster_cmds import parse_partition
from tamto_cli.main import app


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
