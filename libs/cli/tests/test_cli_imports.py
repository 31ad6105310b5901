"""What a `tamto` call imports before it does anything (its start time).

Every call builds the whole command tree, so `tamto_cli.main` and the command
modules import only what defining the commands needs; the SDK (pyarrow, numpy),
the benchmark and the server packages are imported by the command that runs.
These tests run light commands in a fresh interpreter and fail if one of them
loads a heavy package, so the gain cannot silently regress.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

import tamto_sdk
from tamto_cli.extras import DEFERRED, load_deferred
from tamto_cli.main import app
from tamto_common.streams import DEFAULT_ACK_TIMEOUT_MS, DEFAULT_DEDUP_WINDOW_MS

#: Runs `tamto ARGS...` (argv[1:]) and prints, after a marker, the top-level modules loaded.
RUN_AND_LIST = """
import json, sys
from tamto_cli.main import app
try:
    app(sys.argv[1:], prog_name="tamto")
except SystemExit as exc:
    code = exc.code
print("\\nMODULES " + json.dumps([code, sorted({m.split(".")[0] for m in sys.modules})]))
"""
#: Packages a light command must not load: the Arrow stack, the bench, Spark, the launcher.
HEAVY = {"pyarrow", "numpy", "tamto_bench", "tamto_spark", "pyspark", "tamto_local"}


def loaded_by(*args: str, exit_code: int = 0, **env: str) -> set[str]:
    """The top-level modules `tamto ARGS` has loaded by its end (it must exit `exit_code`)."""
    done = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **env},
    )
    marker = done.stdout.rpartition("\nMODULES ")[2]
    code, modules = json.loads(marker)
    assert (code or 0) == exit_code, (args, done.stdout, done.stderr)
    return set(modules)


@pytest.mark.parametrize(
    "args",
    [("--help",), ("stream", "--help"), ("stream", "ensure", "--help"), ("auth", "--help")],
)
def test_light_commands_load_neither_arrow_nor_the_bench(args: tuple[str, ...]) -> None:
    loaded = loaded_by(*args)
    assert "tamto_cli" in loaded
    assert loaded & HEAVY == set(), args


def test_a_command_that_needs_no_server_loads_no_sdk(tmp_path: Path) -> None:
    loaded = loaded_by("context", "list", TAMTO_CONFIG=str(tmp_path / "contexts.json"))
    assert loaded & (HEAVY | {"tamto_sdk"}) == set()


def test_tamto_up_loads_the_launcher_but_not_the_sdk_or_the_bench() -> None:
    """`--nodes 0` is refused after `up` has imported all it runs with (nothing starts);
    only `--demo` needs the SDK."""
    loaded = loaded_by("up", "--nodes", "0", exit_code=2)
    assert "tamto_local" in loaded
    assert loaded & (HEAVY - {"tamto_local"} | {"tamto_sdk"}) == set()


def test_a_deferred_command_loads_its_package_when_it_runs() -> None:
    """The check above can see a package load: `tamto bench --help` loads the bench."""
    assert "tamto_bench" in loaded_by("bench", "--help")


@pytest.mark.parametrize("name", sorted(DEFERRED))
def test_a_deferred_command_is_listed_with_its_docstring_summary(name: str) -> None:
    listed = typer.main.get_command(app).commands[name].help  # type: ignore[attr-defined]
    real = load_deferred(name).help or ""
    assert listed == inspect.cleandoc(real).split("\n\n")[0]


def test_stream_ensure_shows_the_sdk_defaults() -> None:
    """`tamto stream ensure` takes its defaults from tamto_common (the SDK loads pyarrow)."""
    config = tamto_sdk.StreamConfig()
    assert (config.dedup_window_ms, config.ack_timeout_ms) == (
        DEFAULT_DEDUP_WINDOW_MS,
        DEFAULT_ACK_TIMEOUT_MS,
    )


def test_a_subscription_verb_reaches_the_gateway_without_arrow() -> None:
    """`tamto sub describe` runs the SDK's client (here to a gateway nobody serves:
    UNAVAILABLE, exit 11) but none of what moves messages: its CPU is most of it
    imports, and pyarrow with numpy was the larger half."""
    loaded = loaded_by(
        "sub",
        "describe",
        "orders",
        "billing",
        "--url",
        "tamto://127.0.0.1:1",
        "--api-key",
        "k",
        exit_code=11,
        TAMTO_RETRY_DEADLINE_S="0",
    )
    assert {"tamto_sdk", "grpc"} <= loaded
    assert loaded & HEAVY == set()
