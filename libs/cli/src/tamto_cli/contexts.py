"""Named connection profiles (`tamto context add/use/list/remove`), like `nats context`.

A context is a gateway URL with, optionally, an API key and a CA file. They
live in one user config file, ``$TAMTO_CONFIG`` or
``$XDG_CONFIG_HOME/tamto/contexts.json`` (``~/.config/tamto/contexts.json``),
written atomically and readable only by its owner (it holds credentials).
The selected context (``tamto context use``, or ``TAMTO_CONTEXT`` for one
command) fills in what flags and the environment leave open: a flag wins over
``TAMTO_URL``/``TAMTO_API_KEY``/``TAMTO_CA_FILE``, which win over the context,
which wins over the local defaults (`settings`).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from tamto_cli.options import AsJson
from tamto_cli.output import report
from tamto_common.durable import make_dirs, write_atomic


@dataclass(frozen=True)
class Context:
    url: str
    api_key: str | None = None
    ca_file: str | None = None


class ContextError(Exception):
    """The config file or a context name is wrong; the message says how."""


def config_path() -> Path:
    if explicit := os.environ.get("TAMTO_CONFIG"):
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "tamto" / "contexts.json"


def _load() -> tuple[str | None, dict[str, Context]]:
    path = config_path()
    try:
        raw = json.loads(path.read_text())
        contexts = {name: Context(**fields) for name, fields in raw.get("contexts", {}).items()}
        current = raw.get("current")
    except FileNotFoundError:
        return None, {}
    except (ValueError, TypeError, AttributeError) as exc:
        raise ContextError(f"{path} is not a valid contexts file: {exc}") from None
    return current, contexts


def _save(current: str | None, contexts: dict[str, Context]) -> None:
    path = config_path()
    make_dirs(path.parent, mode=0o700)
    body = {"current": current, "contexts": {n: asdict(c) for n, c in sorted(contexts.items())}}
    write_atomic(path, (json.dumps(body, indent=2) + "\n").encode(), mode=0o600)


def selected() -> Context | None:
    """The context commands use: ``TAMTO_CONTEXT``, else the one `use` chose, else none."""
    current, contexts = _load()
    name = os.environ.get("TAMTO_CONTEXT") or current
    if name is None:
        return None
    if name not in contexts:
        raise ContextError(f"no context named {name!r} (tamto context list)")
    return contexts[name]


context_app = typer.Typer(help="Named connection profiles: URL, API key and CA file.")


def _fail(message: str) -> NoReturn:
    typer.echo(f"tamto context: {message}", err=True)
    raise typer.Exit(2)


@context_app.command("add")
def add(
    name: str,
    url: Annotated[str, typer.Option("--url", help="gateway URL (tamto:// or tamtos://)")],
    api_key: Annotated[str | None, typer.Option("--api-key", help="API key to send")] = None,
    ca_file: Annotated[
        Path | None, typer.Option("--ca-file", help="PEM roots for a tamtos:// gateway")
    ] = None,
    use: Annotated[bool, typer.Option("--use", help="also select it")] = False,
    as_json: AsJson = False,
) -> None:
    """Add or replace a context (the first one added is selected)."""
    from tamto_sdk.url import parse_url

    try:
        parse_url(url)
    except ValueError as exc:
        _fail(f"--url: {exc}")
    if ca_file is not None and not ca_file.is_file():
        _fail(f"--ca-file: {ca_file} is not a file")
    try:
        current, contexts = _load()
    except ContextError as exc:
        _fail(str(exc))
    ca = str(ca_file.expanduser().resolve()) if ca_file is not None else None
    contexts[name] = Context(url, api_key, ca)
    selected_now = name if use or current is None else current
    _save(selected_now, contexts)
    fields = {"name": name, "url": url, "selected": selected_now == name}
    report(as_json, f"context {name}: {url}", fields)


@context_app.command("use")
def use(name: str, as_json: AsJson = False) -> None:
    """Select the context every command uses from now on."""
    try:
        _, contexts = _load()
    except ContextError as exc:
        _fail(str(exc))
    if name not in contexts:
        _fail(f"no context named {name!r} (tamto context list)")
    _save(name, contexts)
    report(as_json, f"using context {name}", {"name": name, "selected": True})


@context_app.command("remove")
def remove(name: str, as_json: AsJson = False) -> None:
    """Forget a context (selecting none if it was the selected one)."""
    try:
        current, contexts = _load()
    except ContextError as exc:
        _fail(str(exc))
    if contexts.pop(name, None) is None:
        _fail(f"no context named {name!r} (tamto context list)")
    _save(None if current == name else current, contexts)
    if as_json:
        report(True, "", {"name": name, "removed": True})


@context_app.command("list")
def list_contexts(
    as_json: AsJson = False,
) -> None:
    """The contexts, `*` marking the selected one; API keys are never printed."""
    try:
        current, contexts = _load()
    except ContextError as exc:
        _fail(str(exc))
    rows = [
        {
            "name": name,
            "selected": name == current,
            "url": c.url,
            "api_key": c.api_key is not None,
            "ca_file": c.ca_file,
        }
        for name, c in sorted(contexts.items())
    ]
    if as_json:
        print(json.dumps(rows))
        return
    for row in rows:
        mark = "*" if row["selected"] else " "
        extras = ("key" if row["api_key"] else "no key") + (
            f", ca {row['ca_file']}" if row["ca_file"] else ""
        )
        typer.echo(f"{mark} {row['name']}\t{row['url']}\t{extras}")
