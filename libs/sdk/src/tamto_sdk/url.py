"""Parsing of Tamto server addresses."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from dataclasses import dataclass

__all__ = ["DEFAULT_PORT", "Endpoint", "parse_url", "tls_mismatch"]

#: The gateway's default port.
DEFAULT_PORT = 7400

_SCHEMES = {"tamto": False, "tamtos": True}


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A parsed server address."""

    host: str
    port: int
    tls: bool = False

    @property
    def target(self) -> str:
        """The address in the form gRPC expects (``host:port``, IPv6 bracketed)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_url(url: str) -> Endpoint:
    """Parse ``tamto://host:port``, ``tamtos://host:port`` (TLS) or a bare ``host:port``.

    The port defaults to 7400. Raises ValueError for anything else.
    """
    rest = url.strip()
    tls = False
    if "://" in rest:
        scheme, rest = rest.split("://", 1)
        if scheme.lower() not in _SCHEMES:
            raise ValueError(f"unsupported URL scheme {scheme!r} in {url!r}")
        tls = _SCHEMES[scheme.lower()]
    rest = rest.rstrip("/")
    if not rest or "/" in rest:
        raise ValueError(f"not a Tamto address: {url!r}")
    if rest.startswith("["):
        end = rest.find("]")
        if end < 0:
            raise ValueError(f"unterminated IPv6 address in {url!r}")
        host, tail = rest[1:end], rest[end + 1 :]
        port_text = tail[1:] if tail.startswith(":") else ""
        if tail and not tail.startswith(":"):
            raise ValueError(f"not a Tamto address: {url!r}")
    elif ":" in rest:
        host, port_text = rest.rsplit(":", 1)
    else:
        host, port_text = rest, ""
    if not host:
        raise ValueError(f"missing host in {url!r}")
    try:
        port = int(port_text) if port_text else DEFAULT_PORT
    except ValueError:
        raise ValueError(f"invalid port in {url!r}") from None
    if not 0 < port < 65536:
        raise ValueError(f"port out of range in {url!r}")
    return Endpoint(host=host, port=port, tls=tls)


async def tls_mismatch(endpoint: Endpoint, tls: bool, timeout_s: float = 2.0) -> str | None:
    """A clear message if the server at `endpoint` disagrees with us about TLS, else None.

    Tries a TLS handshake (certificates unchecked: this only asks whether the port
    speaks TLS). Returns None when the port cannot be reached or the two agree.
    """
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(endpoint.host, endpoint.port, ssl=context), timeout_s
        )
    except ssl.SSLError:
        speaks_tls = False
    except (OSError, TimeoutError):
        return None
    else:
        speaks_tls = True
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()
    if speaks_tls and not tls:
        return (
            f"the server at {endpoint.target} requires TLS, but this client connected in "
            f"plaintext: use tamtos://{endpoint.target} (and the server's CA certificate)"
        )
    if tls and not speaks_tls:
        return (
            f"the server at {endpoint.target} does not speak TLS, but this client "
            f"connected with TLS: use tamto://{endpoint.target}"
        )
    return None
