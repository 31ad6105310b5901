"""The command-line options many commands share, defined once (typer `Annotated` types)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tamto_cli.output import PayloadFormat

Url = Annotated[str | None, typer.Option("--url", help="gateway URL (env TAMTO_URL)")]
ApiKey = Annotated[str | None, typer.Option("--api-key", help="API key (env TAMTO_API_KEY)")]
DataDir = Annotated[Path | None, typer.Option("--data-dir", help="where all state lives")]
AsJson = Annotated[bool, typer.Option("--json", help="print JSON")]
#: The services' membership and ownership lease TTL for the systems `tamto up` and
#: `tamto chaos` run (each service's `--lease-ttl-s`): a dead router's partitions move
#: after it, a killed node leaves etcd after it.
LeaseTtl = Annotated[
    int,
    typer.Option(
        "--lease-ttl-s",
        min=1,
        help="seconds a dead service keeps its etcd lease: failover waits this long",
    ),
]
Format = Annotated[
    PayloadFormat,
    typer.Option("--format", help="payloads as raw text, pretty-printed json, or hex"),
]
