"""Where the CLI finds a running system: flags, then environment, then the selected
context (`contexts`), then the local defaults."""

from __future__ import annotations

import os
from pathlib import Path

from tamto_cli.contexts import Context, ContextError, selected

DEFAULT_DATA_DIR = Path(".tamto")
DEFAULT_GATEWAY = "127.0.0.1:7400"
DEFAULT_ETCD = "127.0.0.1:7379"


def data_dir(value: Path | None) -> Path:
    return value or Path(os.environ.get("TAMTO_DATA_DIR", DEFAULT_DATA_DIR))


def context() -> Context | None:
    """The selected connection profile, if any (a bad one ends the command, saying why)."""
    try:
        return selected()
    except ContextError as exc:
        raise SystemExit(f"tamto: {exc}") from None


def gateway_url(value: str | None) -> str:
    if value or (value := os.environ.get("TAMTO_URL")):
        return value
    chosen = context()
    return chosen.url if chosen is not None else f"tamto://{DEFAULT_GATEWAY}"


def api_key(value: str | None, data: Path) -> str:
    """The API key: --api-key, TAMTO_API_KEY, the selected context's, or the local
    system's development credential."""
    from tamto_common.dev_credential import CredentialFileError, load_dev_credential

    if value:
        return value
    if env := os.environ.get("TAMTO_API_KEY"):
        return env
    chosen = context()
    if chosen is not None and chosen.api_key:
        return chosen.api_key
    try:
        credential = load_dev_credential(data)
    except CredentialFileError as exc:
        raise SystemExit(str(exc)) from None
    if credential is not None:
        return credential
    raise SystemExit(
        "no API key: pass --api-key, set TAMTO_API_KEY, or run `tamto up` in this directory"
    )
