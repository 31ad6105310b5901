"""The `tamto` command line: the command tree, each group from its own module.

Every `tamto` call imports this module and builds the whole command tree, so it
imports only what defining the commands needs (typer, rich, the light `tamto_cli`
modules). The SDK (pyarrow, numpy), the server packages and the status
probes are imported inside the command that uses them, and `tamto bench` and
`tamto chaos` are loaded only when they run (`extras.add_server_command`):
`tamto --help` or `tamto stream --help` load none of them
(libs/cli/tests/test_cli_imports.py).
"""

from __future__ import annotations

import typer

from tamto_cli import ephemeral_cmds, message_cmds, system_cmds
from tamto_cli.auth_cmds import auth_app
from tamto_cli.cluster_cmds import node_app, partition_app
from tamto_cli.contexts import context_app
from tamto_cli.extras import add_server_command
from tamto_cli.function_cmds import function_app
from tamto_cli.storage_cmds import storage_app
from tamto_cli.stream_cmds import stream_app
from tamto_cli.subscription_cmds import VerbRouting, subscription_app

app = typer.Typer(
    cls=VerbRouting, help="Tamto: durable streams, subscriptions and Parquet, in one system."
)

app.command()(system_cmds.up)
app.command()(system_cmds.status)
app.command()(system_cmds.top)
app.command("scrape-targets")(system_cmds.scrape_targets)
app.add_typer(auth_app, name="auth")
app.add_typer(storage_app, name="storage")
app.add_typer(context_app, name="context")
app.add_typer(subscription_app, name="subscription")
app.add_typer(partition_app, name="partition")
app.add_typer(node_app, name="node")
app.add_typer(function_app, name="function")
add_server_command(
    app,
    "bench",
    "tamto_bench",
    "bench",
    "Measure throughput, latency and memory of Tamto beside NATS JetStream, and its\n"
    "ephemeral streams beside core NATS (loopback only).",
)
app.command("request")(ephemeral_cmds.request)
add_server_command(
    app,
    "chaos",
    "tamto_cli.chaos",
    "chaos",
    "Run a local system and hit random processes with faults while clients publish and\n"
    "consume; report lost, duplicated, stalls beyond downtime and recovery per fault.",
)
app.add_typer(stream_app, name="stream")
app.command()(message_cmds.pub)
app.command()(message_cmds.sub)
