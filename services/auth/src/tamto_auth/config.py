"""The auth service's settings, on top of every service's."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tamto_common.apikeys import is_api_key
from tamto_common.config import ServiceConfig, positive, setting


def _api_key_check(value: str) -> str | None:
    # The problem text never quotes the value: it may be a real key with a typo.
    if not value or is_api_key(value):
        return None
    return "not a Tamto API key (expected tamto_<12 hex chars>_<secret>)"


def _non_empty(value: str) -> str | None:
    return None if value.strip() else "must not be empty"


def _secret_setting(default: str, help: str) -> Any:
    """Like `setting()`, but kept out of the config's repr so a logged config leaks nothing."""
    return dataclasses.field(
        default=default, repr=False, metadata={"help": help, "check": _api_key_check}
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class AuthConfig(ServiceConfig):
    """Settings of the auth service."""

    # Path is immutable, so sharing one default instance is safe.
    data_dir: Path = setting(  # noqa: RUF009
        Path(".tamto/data"), "data directory (signing keys live under auth/)"
    )
    token_ttl_s: int = setting(900, "lifetime of an issued token in seconds", positive)
    issuer: str = setting("tamto", "`iss` claim of issued tokens", _non_empty)
    audience: str = setting("tamto", "`aud` claim of issued tokens", _non_empty)
    dev_api_key: str = _secret_setting(
        "", "development API key to ensure in etcd at start (empty: none)"
    )
    dev_subject: str = setting(
        "dev", "subject the development API key authenticates as", _non_empty
    )
    dev_role: str = setting(
        "admin", "role (admin on *) bound to the development subject", _non_empty
    )
    signing_key_max_age_s: int = setting(
        7 * 86400, "rotate the signing key when it is this old (seconds)", positive
    )
    audit_file: str = setting("", "append audit records (JSON lines) here (empty: bus only)")

    @property
    def audit_path(self) -> Path | None:
        """Where audit records are appended, or None."""
        return Path(self.audit_file).expanduser() if self.audit_file else None

    @property
    def signing_key_retain_s(self) -> int:
        """How long a retired signing key stays in the JWKS: its tokens' lifetime, and a minute."""
        return self.token_ttl_s + 60

    @property
    def signing_keys_dir(self) -> Path:
        return self.data_dir / "auth" / "signing-keys"
