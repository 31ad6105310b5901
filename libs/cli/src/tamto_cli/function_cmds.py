"""`tamto function deploy|update|pause|resume|delete|list|describe|status`: processing
functions from the command line (docs/processing.md).

A spec is a JSON or YAML file (by its suffix: ``.yaml``/``.yml`` is YAML, anything else
JSON) in the schema the gateway validates; the CLI reads it and passes it on, so a bad
spec's error is the gateway's, naming the field, step, expression or stream. Every
command prints a line or a table for people, or one JSON object with ``--json``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from tamto_cli.connect import Gateway, reaches_gateway
from tamto_cli.options import AsJson

if TYPE_CHECKING:
    import tamto_sdk

err = Console(stderr=True, highlight=False)

function_app = typer.Typer(
    help="Deploy, update, pause, resume, delete and inspect processing functions."
)

SpecFile = Annotated[
    Path, typer.Argument(metavar="FILE", help="the spec, as JSON or YAML (.yaml, .yml)")
]
Name = Annotated[str, typer.Argument(help="the function's name")]


def read_spec(path: Path) -> dict[str, Any]:
    """The spec in `path` as a mapping; exit 2 naming the file when it cannot be read."""
    try:
        text = path.read_text()
    except OSError as exc:
        err.print(f"tamto: cannot read {path}: {exc.strerror or exc}")
        raise typer.Exit(2) from None
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml  # only a YAML spec pays for loading it

            spec = yaml.safe_load(text)
        else:
            spec = json.loads(text)
    except ValueError as exc:  # yaml.YAMLError is a ValueError subclass too
        err.print(f"tamto: {path} is not a valid spec file: {exc}")
        raise typer.Exit(2) from None
    if not isinstance(spec, dict):
        err.print(f"tamto: {path} must hold one mapping (the spec)")
        raise typer.Exit(2)
    return spec


def _info_json(info: tamto_sdk.functions.FunctionInfo) -> dict[str, Any]:
    return {**dataclasses.asdict(info), "spec": dict(info.spec)}


def _print_info(info: tamto_sdk.functions.FunctionInfo, verb: str, as_json: bool) -> None:
    if as_json:
        print(json.dumps(_info_json(info)))
    else:
        typer.echo(f"{info.name}: {verb} (version {info.version}, {info.state})")


def _spec_command(name: str, done: str, doc: str) -> None:
    """`tamto function deploy` or `update`: one code path, the SDK verb differs."""

    @reaches_gateway
    def command(gateway: Gateway, file: SpecFile, as_json: AsJson = False) -> None:
        spec = read_spec(file)

        def call(client: tamto_sdk.Client) -> Awaitable[tamto_sdk.functions.FunctionInfo]:
            verb = client.functions.deploy if name == "deploy" else client.functions.update
            return verb(spec)

        _print_info(gateway.fetch(call), done, as_json)

    command.__doc__ = doc
    function_app.command(name)(command)


def _state_command(name: str, done: str, doc: str) -> None:
    """`tamto function pause` or `resume`."""

    @reaches_gateway
    def command(gateway: Gateway, function: Name, as_json: AsJson = False) -> None:
        def call(client: tamto_sdk.Client) -> Awaitable[tamto_sdk.functions.FunctionInfo]:
            verb = client.functions.pause if name == "pause" else client.functions.resume
            return verb(function)

        _print_info(gateway.fetch(call), done, as_json)

    command.__doc__ = doc
    function_app.command(name)(command)


_spec_command("deploy", "deployed", "Deploy a function; its identity gets a new API key.")
_spec_command("update", "updated", "Replace a function's spec; nodes roll onto the new one.")
_state_command("pause", "paused", "Stop a function's instances; its subscriptions stay.")
_state_command("resume", "resumed", "Start a paused function's instances where they stopped.")


@function_app.command("delete")
@reaches_gateway
def delete(gateway: Gateway, function: Name, as_json: AsJson = False) -> None:
    """Delete a function: its spec, API key, statuses and window state."""

    deleted = gateway.fetch(lambda client: client.functions.delete(function))
    if as_json:
        print(json.dumps({"name": function, "deleted": deleted}))
    else:
        typer.echo(f"{function}: {'deleted' if deleted else 'not deployed'}")


@function_app.command("list")
@reaches_gateway
def list_functions(gateway: Gateway, as_json: AsJson = False) -> None:
    """List deployed functions: name, version, state, identity."""

    infos = gateway.fetch(lambda client: client.functions.list())
    if as_json:
        print(json.dumps([_info_json(i) for i in infos]))
        return
    table = Table("name", "version", "state", "identity", "inputs", "output")
    for info in infos:
        inputs = ", ".join(str(i.get("stream", i)) for i in info.spec.get("inputs", []))
        table.add_row(
            info.name, str(info.version), info.state, info.identity, inputs, info.spec["output"]
        )
    Console().print(table)


@function_app.command("describe")
@reaches_gateway
def describe(gateway: Gateway, function: Name, as_json: AsJson = False) -> None:
    """Show a function's stored spec, with its version and state."""

    info = gateway.fetch(lambda client: client.functions.describe(function))
    if as_json:
        print(json.dumps(_info_json(info)))
    else:
        typer.echo(json.dumps(dict(info.spec), indent=2))


@function_app.command("status")
@reaches_gateway
def status(gateway: Gateway, function: Name, as_json: AsJson = False) -> None:
    """Where each instance runs, its counters, rate and last error; each input's lag."""

    found = gateway.fetch(lambda client: client.functions.status(function))
    if as_json:
        document = dataclasses.asdict(found)
        document["function"] = _info_json(found.function)
        print(json.dumps(document))
        return
    info = found.function
    typer.echo(f"{info.name}: version {info.version}, {info.state}, runs as {info.identity}")
    for i in found.instances:
        typer.echo(
            f"{i.instance} on {i.node} (version {i.version}): processed {i.processed}, "
            f"published {i.published}, errors {i.errors}, {i.rate:,.1f} msg/s, "
            f"restarts {i.restarts}"
        )
        if i.last_error:
            typer.echo(f"  last error: {i.last_error}")
    if not found.instances:
        typer.echo("no instance runs" + (" (paused)" if info.state == "paused" else " yet"))
    for lag in found.lag:
        typer.echo(f"lag on {lag.stream}: {lag.backlog_messages} messages")
