"""The CLI's two installs: client commands always, server commands with an extra.

`pip install tamto-cli` brings the client commands (pub, sub, stream, auth, status,
request, ...) with the SDK alone; `tamto up`, `tamto chaos` and `tamto storage
verify/repair` run the servers' code and need `pip install 'tamto-cli[server]'`.
Those commands import the server packages inside their functions, under
`server_extra`, which turns a missing server package into one clear line naming
the extra instead of a traceback. `tamto bench` is the development-only package
tamto-bench (libs/bench), registered when it is installed (`add_server_command`).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator

import typer

#: The extra that brings the server packages.
SERVER_EXTRA = "server"
#: Top-level modules of the packages only the server extra installs.
SERVER_MODULES = frozenset(
    {"tamto_local", "tamto_gateway", "tamto_router", "tamto_storage", "tamto_auth"}
)
#: The development-only benchmark package (never installed by an extra).
BENCH_MODULE = "tamto_bench"


def missing_extra_message(command: str, module: str = "") -> str:
    if module == BENCH_MODULE:
        return (
            f"{command} is development only: install the workspace's libs/bench "
            "(tamto-bench), as ./dev does"
        )
    return (
        f"{command} needs Tamto's server packages, which this install lacks: "
        f"pip install 'tamto-cli[{SERVER_EXTRA}]'"
    )


@contextlib.contextmanager
def server_extra(command: str) -> Iterator[None]:
    """Import server packages inside this block; when one is missing, exit 2 naming the extra.

    Only a missing *server* module is translated; any other import error is a bug and raises.
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        if not _missing_module(exc):
            raise
        typer.echo(missing_extra_message(command, _missing_module(exc)), err=True)
        raise typer.Exit(2) from None


def _missing_module(exc: ModuleNotFoundError) -> str:
    """The optional top-level module `exc` is about, or "" when it is not one of ours."""
    top = (exc.name or "").split(".")[0]
    return top if top in SERVER_MODULES or top == BENCH_MODULE else ""


def add_server_command(app: typer.Typer, name: str, module: str, attr: str) -> None:
    """Register `module.attr` as command `name`; without the server extra, a stand-in
    that accepts any arguments and exits 2 naming the extra (its options need the
    server packages to be defined at all, so the real command cannot load)."""
    try:
        command: Callable[..., None] = getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError as exc:
        if not _missing_module(exc):
            raise
        message = missing_extra_message(f"tamto {name}", _missing_module(exc))

        @app.command(
            name,
            help="(not installed here: run it for the reason)",
            context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
            add_help_option=False,
        )
        def unavailable(ctx: typer.Context) -> None:
            typer.echo(message, err=True)
            raise typer.Exit(2)

        return
    app.command(name)(command)
