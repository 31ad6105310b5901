"""How CLI commands reach the gateway: URL, API key and, for `tamtos://`, the CA."""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import typer
from rich.console import Console

from tamto_cli import settings
from tamto_cli.options import ApiKey, DataDir, Url
from tamto_cli.output import report

if TYPE_CHECKING:
    import tamto_sdk

T = TypeVar("T")
P = ParamSpec("P")
err = Console(stderr=True, highlight=False)


def ca_certificates(data: Path) -> bytes | None:
    """PEM roots for a TLS gateway: TAMTO_CA_FILE, else the selected context's CA file,
    else the local dev CA (`tamto up --tls`)."""
    if path := os.environ.get("TAMTO_CA_FILE"):
        return Path(path).expanduser().read_bytes()
    chosen = settings.context()
    if chosen is not None and chosen.ca_file:
        return Path(chosen.ca_file).read_bytes()
    local = data / "tls" / "ca.pem"
    return local.read_bytes() if local.exists() else None


def retry_deadline_s() -> float:
    """How long a command retries an unreachable or unavailable gateway before it
    fails: TAMTO_RETRY_DEADLINE_S seconds, else the SDK's default (30 s). Anything
    but a number of seconds, 0 or more, is bad usage (exit 2)."""
    import tamto_sdk

    default = tamto_sdk.ClientOptions().retry_deadline_s
    raw = os.environ.get("TAMTO_RETRY_DEADLINE_S")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        err.print(f"tamto: TAMTO_RETRY_DEADLINE_S must be seconds, 0 or more, got {raw!r}")
        raise typer.Exit(2)
    return value


async def connect_client(
    url: str | None, api_key: str | None, data_dir: Path | None
) -> tamto_sdk.Client:
    """An SDK client for the CLI's flags, environment and local defaults."""
    import tamto_sdk
    from tamto_sdk.url import parse_url

    options = tamto_sdk.ClientOptions(retry_deadline_s=retry_deadline_s())
    data = settings.data_dir(data_dir)
    creds = settings.api_key(api_key, data)
    target = settings.gateway_url(url)
    if parse_url(target).tls:
        options = replace(options, root_certificates=ca_certificates(data))
    return await tamto_sdk.connect(target, api_key=creds, options=options)


#: The exit code of a command that failed with each gRPC status (README, "Exit
#: codes"): a script tells a missing subscription from an offset out of range
#: without reading the message. 2 is bad usage (the command line itself); 1 any
#: other failure (INTERNAL, UNKNOWN, CANCELLED, and errors that are no status).
EXIT_CODES: dict[str, int] = {
    "INVALID_ARGUMENT": 3,
    "NOT_FOUND": 4,
    "ALREADY_EXISTS": 5,
    "PERMISSION_DENIED": 6,
    "UNAUTHENTICATED": 7,
    "FAILED_PRECONDITION": 8,
    "OUT_OF_RANGE": 9,
    "RESOURCE_EXHAUSTED": 10,
    "UNAVAILABLE": 11,
    "DEADLINE_EXCEEDED": 12,
    "DATA_LOSS": 13,
}


def exit_code(status: str) -> int:
    """The exit code for a failure with gRPC status `status` (its name)."""
    return EXIT_CODES.get(status, 1)


def fetch(
    url: str | None,
    api_key: str | None,
    data_dir: Path | None,
    use: Callable[[tamto_sdk.Client], Awaitable[T]],
) -> T:
    """Connect as the CLI's flags say, `use` the client once and return what it gave;
    errors are reported as `run` reports them."""

    async def go() -> T:
        async with await connect_client(url, api_key, data_dir) as client:
            return await use(client)

    return run(go())


@dataclass(frozen=True)
class Gateway:
    """The gateway a command reaches, as its --url, --api-key and --data-dir say
    (`reaches_gateway` gives a command these options)."""

    url: str | None = None
    api_key: str | None = None
    data_dir: Path | None = None

    def fetch(self, use: Callable[[tamto_sdk.Client], Awaitable[T]]) -> T:
        """`fetch` with this gateway."""
        return fetch(self.url, self.api_key, self.data_dir, use)

    def delete(
        self,
        what: str,
        name: str,
        delete: Callable[[tamto_sdk.Client], Awaitable[bool]],
        as_json: bool,
    ) -> None:
        """Delete `what` `name` (`delete` says whether it existed) and report it deleted;
        exit 4 (NOT_FOUND) if there was none."""
        require_found(self.fetch(delete), f"{what} {name!r}")
        report(as_json, f"{name}: deleted", {"name": name, "deleted": True})


def reaches_gateway(command: Callable[Concatenate[Gateway, P], T]) -> Callable[P, T]:
    """`command` with the options that say which gateway it reaches (--url, --api-key,
    --data-dir) after its own, given to it as its first parameter, a `Gateway`.

    Typer reads a command's options from its signature: the one this returns lists
    the command's own parameters but the first, then these three.
    """
    own = list(inspect.signature(command, eval_str=True).parameters.values())[1:]
    keyword = inspect.Parameter.KEYWORD_ONLY
    shared = [
        inspect.Parameter("url", keyword, default=None, annotation=Url),
        inspect.Parameter("api_key", keyword, default=None, annotation=ApiKey),
        inspect.Parameter("data_dir", keyword, default=None, annotation=DataDir),
    ]

    @functools.wraps(command)
    def with_gateway(*args: P.args, **kwargs: P.kwargs) -> T:
        url = kwargs.pop("url", None)
        api_key = kwargs.pop("api_key", None)
        data_dir = kwargs.pop("data_dir", None)
        return command(Gateway(url, api_key, data_dir), *args, **kwargs)  # type: ignore[arg-type]

    with_gateway.__signature__ = inspect.Signature([*own, *shared])  # type: ignore[attr-defined]
    return with_gateway


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine; a Tamto error is one line on stderr and the exit
    code of its status (`EXIT_CODES`)."""
    import tamto_sdk

    try:
        return asyncio.run(coro)
    except tamto_sdk.TamtoError as exc:
        err.print(f"tamto: {exc}")
        raise typer.Exit(exit_code(exc.code)) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def require_found(found: bool, what: str) -> None:
    """Exit 4 (NOT_FOUND) saying `what` does not exist, unless it was `found`."""
    if not found:
        err.print(f"tamto: {what} does not exist")
        raise typer.Exit(exit_code("NOT_FOUND"))
