"""Every `tamto` command takes ``--json`` and, given it, prints JSON a script can parse.

The walk finds every command of the tree (the deferred ones loaded), so a command
added without ``--json`` fails here. The commands that need no running system run
here; tests/e2e/test_cli_json_everywhere.py runs the rest against a real one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from tamto_cli.extras import DEFERRED, load_deferred
from tamto_cli.main import app


def every_command() -> Iterator[tuple[str, Any]]:
    """(``"group sub"`` path, click command) for every leaf command of `tamto`."""

    def walk(command: Any, path: list[str]) -> Iterator[tuple[str, Any]]:
        children = getattr(command, "commands", None)
        if children is None:
            if path[0] in DEFERRED:
                command = load_deferred(path[0])
            yield " ".join(path), command
            return
        for name, child in sorted(children.items()):
            yield from walk(child, [*path, name])

    yield from walk(typer.main.get_command(app), [])


COMMANDS = dict(every_command())


def test_the_walk_finds_the_command_tree() -> None:
    assert {"pub", "sub", "subscription overview", "stream delete", "auth role put"} <= set(
        COMMANDS
    )


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_the_command_takes_json(path: str) -> None:
    options = {opt for param in COMMANDS[path].params for opt in getattr(param, "opts", [])}
    assert "--json" in options, f"tamto {path} has no --json"


def parsed(result: Any) -> list[Any]:
    """Every stdout line of a command run with --json, parsed (at least one)."""
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert lines, "no output"
    return [json.loads(line) for line in lines]


def test_the_commands_that_need_no_system_print_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAMTO_CONFIG", str(tmp_path / "contexts.json"))
    run = CliRunner().invoke
    added = parsed(run(app, ["context", "add", "here", "--url", "tamto://h:1", "--json"]))
    assert added == [{"name": "here", "url": "tamto://h:1", "selected": True}]
    run(app, ["context", "add", "there", "--url", "tamto://t:1", "--api-key", "k"])
    assert parsed(run(app, ["context", "use", "there", "--json"])) == [
        {"name": "there", "selected": True}
    ]
    (listed,) = parsed(run(app, ["context", "list", "--json"]))
    assert [c["name"] for c in listed] == ["here", "there"]
    assert parsed(run(app, ["context", "remove", "here", "--json"])) == [
        {"name": "here", "removed": True}
    ]
    empty = tmp_path / "storage"
    empty.mkdir()
    assert parsed(run(app, ["storage", "verify", "--data-dir", str(empty), "--json"])) == [[]]
    repaired = parsed(run(app, ["storage", "repair", "--data-dir", str(empty), "--yes", "--json"]))
    assert repaired == [{"damaged": [], "repaired": [], "still_damaged": []}]
    asks = run(app, ["storage", "repair", "--data-dir", str(empty), "--json"])
    assert asks.exit_code == 2
