"""The CLI's two installs: client commands always, server commands with an extra.

`pip install tamto-cli` brings the client commands (pub, sub, stream, auth, status,
request, ...) with the SDK alone; `tamto up`, `tamto chaos` and `tamto storage
verify/repair` run the servers' code and need `pip install 'tamto-cli[server]'`.
Those commands import the server packages inside their functions, under
`server_extra`, which turns a missing server package into one clear line naming
the extra instead of a traceback. `tamto bench` is the development-only package
tamto-bench (libs/bench). `tamto bench` and `tamto chaos` define their options from
those packages, so `add_server_command` registers them deferred: their module is
imported only when the command runs, which keeps every other `tamto` call (and
`tamto --help`) from loading the benchmark, the local launcher or pyarrow.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import typer
from typer.core import TyperGroup

if TYPE_CHECKING:
    from typer._click import Command, Context

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


#: Deferred commands: name -> (module, attribute of the command function).
DEFERRED: dict[str, tuple[str, str]] = {}


def add_server_command(app: typer.Typer, name: str, module: str, attr: str, summary: str) -> None:
    """Register `module.attr` as command `name`, imported only when the command runs.

    Until then a stand-in takes its place, listed in `tamto --help` with `summary` (the
    first paragraph of the real command's docstring; a test holds them equal). When the
    command line names it, `DeferringGroup` swaps in the real command before parsing
    its arguments, so options, help and errors are the real command's. Where its
    packages are not installed, it is listed as such and running it exits 2 naming
    the extra.
    """
    DEFERRED[name] = (module, attr)
    listed = summary if _installed(module) else "(not installed here: run it for the reason)"

    @app.command(name, help=listed)
    def deferred() -> None:  # never runs: DeferringGroup resolves `name` to the real command
        raise AssertionError(f"tamto {name}: the deferred command was not loaded")


class DeferringGroup(TyperGroup):
    """A command group that loads a deferred command (`add_server_command`) when the
    command line names it; listing the commands (--help) loads none."""

    def resolve_command(
        self, ctx: Context, args: list[str]
    ) -> tuple[str | None, Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if name in DEFERRED:
            command = load_deferred(name)
        return name, command, rest


def load_deferred(name: str) -> Command:
    """The real click command of deferred command `name` (exit 2 naming the extra when
    its packages are missing)."""
    module, attr = DEFERRED[name]
    with server_extra(f"tamto {name}"):
        function: Callable[..., None] = getattr(importlib.import_module(module), attr)
    alone = typer.Typer(add_completion=False)
    alone.command(name)(function)
    return typer.main.get_command(alone)


def _installed(module: str) -> bool:
    """Whether `module`'s package and the server packages can be imported (found, not
    imported: listing a command must not load it)."""
    for top in (module.split(".")[0], *sorted(SERVER_MODULES)):
        try:
            if importlib.util.find_spec(top) is None:
                return False
        except ModuleNotFoundError:
            return False
    return True
