"""`tamto partition move STREAM/P --to ROUTER` and `tamto node drain|undrain NODE`:
an operator's say in where partitions live (docs/cluster.md section 4).

Both are recorded in etcd through the gateway (admin on `*`) and honoured by every
gateway and router: a moved partition stays on its router until it is moved
``--to ring`` or that router leaves; a drained router gets no partitions until it
is undrained. Each prints one line, or one JSON object with ``--json``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from tamto_cli.connect import Gateway, fetch, reaches_gateway
from tamto_cli.options import ApiKey, AsJson, DataDir, Url

if TYPE_CHECKING:
    import tamto_sdk

err = Console(stderr=True, highlight=False)

partition_app = typer.Typer(help="Place a stream's partition on a router.")
node_app = typer.Typer(help="Drain a router of its partitions, or undrain it.")

#: `--to ring`: back to the consistent-hash ring's choice.
RING = "ring"


def parse_partition(text: str) -> tuple[str, int]:
    """STREAM/P (P a partition number); exit 2 otherwise."""
    stream, slash, number = text.rpartition("/")
    if slash and stream and number.isdigit():
        return stream, int(number)
    err.print(f"a partition is STREAM/P (e.g. orders/3), not {text!r}")
    raise typer.Exit(2)


@partition_app.command("move")
@reaches_gateway
def partition_move(
    gateway: Gateway,
    partition: Annotated[str, typer.Argument(metavar="STREAM/P", help="e.g. orders/3")],
    to: Annotated[
        str,
        typer.Option("--to", help="a router's instance id, or 'ring' for the ring's choice"),
    ],
    as_json: AsJson = False,
) -> None:
    """Move a partition to a live router (kept until moved --to ring or the router
    leaves); its subscriptions keep each key's order across the move."""
    stream, number = parse_partition(partition)
    target = None if to == RING else to

    owner = gateway.fetch(lambda client: client.cluster.move_partition(stream, number, target))
    if as_json:
        print(json.dumps({"stream": stream, "partition": number, "router": owner}))
    else:
        typer.echo(f"{stream}/{number}: placed on {owner}" + ("" if target else " (the ring's)"))


def _node_command(name: str, drain: bool, doc: str) -> None:
    """`tamto node drain` (drain True) or `tamto node undrain`: one code path, which
    prints the routers drained after the change."""

    def command(
        node: Annotated[str, typer.Argument(help="a router's instance id, e.g. router-2")],
        url: Url = None,
        api_key: ApiKey = None,
        data_dir: DataDir = None,
        as_json: AsJson = False,
    ) -> None:
        def change(client: tamto_sdk.Client) -> Awaitable[list[str]]:
            return (client.cluster.drain if drain else client.cluster.undrain)(node)

        drained = fetch(url, api_key, data_dir, change)
        if as_json:
            print(json.dumps({"node": node, "drained": drain, "drained_nodes": drained}))
        else:
            typer.echo(f"{node}: {name}ed (drained routers: {', '.join(drained) or 'none'})")

    command.__doc__ = doc
    node_app.command(name)(command)


_node_command("drain", True, "Move every partition off a router; it gets none until undrained.")
_node_command(
    "undrain", False, "Let a drained router own partitions again (its share of the ring)."
)
