"""External OIDC issuers the gateways and routers trust, by configuration.

Both verify client tokens (a router for the direct path, docs/cluster.md section 5),
so both read the same setting, `--oidc-issuers-file` (`oidc_issuers_file_setting`;
`TAMTO_OIDC_ISSUERS_FILE` sets it for every service), which names a JSON file:

    [{"name": "corp",                          subjects become "corp:<sub>"
      "issuer": "https://login.example.com",   the `iss` claim to expect
      "audience": "tamto",                     the `aud` claim to expect
      "jwks_file": "/etc/tamto/corp-jwks.json" or "jwks_url": "https://.../jwks",
      "algorithms": ["RS256", "ES256"]}]       optional; default RS256, ES256, EdDSA

A token's unverified `iss` picks the issuer; its signature, `aud`, `exp` and
`iat` are then checked against that issuer's keys. Subjects are prefixed with
the issuer's name so no external identity can take the name of a local one
(local identity names hold no `:`). HMAC algorithms and `none` are refused in
the configuration: the algorithm comes from configuration and key, never from
the token alone.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import structlog

from tamto_common.config import setting
from tamto_common.errors import ConfigError, TamtoError, Unauthenticated, Unavailable
from tamto_common.policy import check_identity_name
from tamto_common.tokens import (
    REQUIRED_CLAIMS,
    IssuerVerifier,
    Principal,
    decode_errors,
    token_header,
)

log = structlog.get_logger(__name__)

SETTING = "--oidc-issuers-file"
DEFAULT_ALGORITHMS = ("RS256", "ES256", "EdDSA")
ALLOWED_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)


def oidc_issuers_file_setting() -> Any:
    """The `oidc_issuers_file` field of a service's config (gateway and router)."""
    return setting("", "JSON file listing trusted external OIDC issuers (empty: none)")


@dataclass(frozen=True, slots=True)
class OidcIssuer:
    """One trusted external issuer."""

    name: str
    issuer: str
    audience: str
    jwks_file: str = ""
    jwks_url: str = ""
    algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS


def load_issuers(path: Path) -> tuple[OidcIssuer, ...]:
    """Read and check the issuers file; `ConfigError` naming the problem."""
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(SETTING, f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigError(SETTING, f"{path} is not JSON: {exc}") from None
    if not isinstance(raw, list):
        raise ConfigError(SETTING, f"{path} must hold a JSON list of issuers")
    issuers = [_issuer(entry, i) for i, entry in enumerate(raw)]
    seen: set[str] = set()
    for item in issuers:
        if item.issuer in seen:
            raise ConfigError(SETTING, f"issuer {item.issuer!r} is listed twice")
        seen.add(item.issuer)
    return tuple(issuers)


def _issuer(entry: Any, index: int) -> OidcIssuer:
    where = f"issuer #{index + 1}"
    if not isinstance(entry, dict):
        raise ConfigError(SETTING, f"{where} must be a JSON object")
    unknown = set(entry) - {"name", "issuer", "audience", "jwks_file", "jwks_url", "algorithms"}
    if unknown:
        raise ConfigError(SETTING, f"{where} has unknown field(s) {', '.join(sorted(unknown))}")
    for required in ("name", "issuer", "audience"):
        if not isinstance(entry.get(required), str) or not entry[required]:
            raise ConfigError(SETTING, f"{where} needs a non-empty string {required!r}")
    try:
        check_identity_name(entry["name"])
    except TamtoError as exc:
        raise ConfigError(SETTING, f"{where}: {exc}") from None
    jwks_file, jwks_url = entry.get("jwks_file", ""), entry.get("jwks_url", "")
    if bool(jwks_file) == bool(jwks_url):
        raise ConfigError(SETTING, f"{where} needs exactly one of jwks_file and jwks_url")
    if jwks_url and not str(jwks_url).startswith(("https://", "http://")):
        raise ConfigError(SETTING, f"{where}: jwks_url must be an http(s) URL")
    algorithms = tuple(entry.get("algorithms", DEFAULT_ALGORITHMS))
    bad = [a for a in algorithms if a not in ALLOWED_ALGORITHMS]
    if bad or not algorithms:
        raise ConfigError(
            SETTING,
            f"{where}: algorithms must be among {', '.join(sorted(ALLOWED_ALGORITHMS))}"
            + (f" (not {', '.join(map(str, bad))})" if bad else ""),
        )
    return OidcIssuer(
        name=entry["name"],
        issuer=entry["issuer"],
        audience=entry["audience"],
        jwks_file=str(jwks_file),
        jwks_url=str(jwks_url),
        algorithms=algorithms,
    )


def _read_jwks(issuer: OidcIssuer, timeout_s: float) -> str:
    if issuer.jwks_file:
        return Path(issuer.jwks_file).expanduser().read_text()
    request = urllib.request.Request(issuer.jwks_url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        body: bytes = response.read(1 << 20)
        return body.decode()


class ExternalVerifier:
    """Verifies one external issuer's tokens against its JWKS, refetched on an unknown kid.

    Refetches are limited to one per `refetch_interval_s`.
    """

    def __init__(
        self,
        issuer: OidcIssuer,
        leeway_s: float = 5,
        refetch_interval_s: float = 5,
        fetch_timeout_s: float = 5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer = issuer
        self._leeway_s = leeway_s
        self._refetch_interval_s = refetch_interval_s
        self._fetch_timeout_s = fetch_timeout_s
        self._clock = clock
        self._keys: dict[str, jwt.PyJWK] = {}
        self._last_fetch: float | None = None
        self._lock = asyncio.Lock()
        self._keys_changed: list[Callable[[], None]] = []
        self._jwks_text = ""

    def on_keys_changed(self, listener: Callable[[], None]) -> None:
        """Call `listener` whenever a refetch changes this issuer's key set."""
        self._keys_changed.append(listener)

    async def verify(self, token: str) -> Principal:
        """The principal (`<name>:<sub>`) of a valid token; `Unauthenticated` otherwise."""
        alg, kid = token_header(token, self.issuer.algorithms)
        key = await self._key(kid)
        if key.algorithm_name != alg:
            raise Unauthenticated("token algorithm does not match its key")
        with decode_errors():
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                issuer=self.issuer.issuer,
                audience=self.issuer.audience,
                leeway=self._leeway_s,
                options={"require": list(REQUIRED_CLAIMS)},
            )
        subject = claims["sub"]
        if not isinstance(subject, str) or not subject:
            raise Unauthenticated("token subject invalid")
        return Principal(subject=f"{self.issuer.name}:{subject}", expires_at=float(claims["exp"]))

    async def _key(self, kid: str) -> jwt.PyJWK:
        key = self._keys.get(kid)
        if key is not None:
            return key
        async with self._lock:
            key = self._keys.get(kid)
            if key is None and (
                self._last_fetch is None
                or self._clock() - self._last_fetch >= self._refetch_interval_s
            ):
                await self._refetch()
                key = self._keys.get(kid)
        if key is None:
            raise Unauthenticated("token signed by unknown key")
        return key

    async def _refetch(self) -> None:
        self._last_fetch = self._clock()
        try:
            text = await asyncio.to_thread(_read_jwks, self.issuer, self._fetch_timeout_s)
            keys = jwt.PyJWKSet.from_json(text).keys
        except Exception as exc:
            raise Unavailable(
                f"cannot fetch the JWKS of issuer {self.issuer.name}: {exc}"
            ) from None
        self._keys = {k.key_id: k for k in keys if k.key_id and k.algorithm_name != "none"}
        log.info("oidc keys refreshed", issuer=self.issuer.name, kids=sorted(self._keys))
        previous, self._jwks_text = self._jwks_text, text
        if previous and text != previous:  # a different document: forget what it verified
            for listener in self._keys_changed:
                listener()


def external_verifiers(issuers_file: str) -> dict[str, IssuerVerifier]:
    """A verifier per issuer of `issuers_file` (`--oidc-issuers-file`), by its `iss`, for
    `tamto_common.tokens.Authenticator`; none when the setting is empty. `ConfigError`
    naming the problem (the service stops with one line)."""
    if not issuers_file:
        return {}
    issuers = load_issuers(Path(issuers_file).expanduser())
    if issuers:
        log.info("oidc issuers trusted", issuers=[i.name for i in issuers])
    return {i.issuer: ExternalVerifier(i) for i in issuers}
