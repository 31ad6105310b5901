"""Who an HTTP request speaks for: `Authorization: Bearer <token>` or `X-Api-Key`.

A request is handed to the gateway's gRPC handlers as an `HttpCall`: the metadata
they authenticate (`authorization: Bearer <token>`) and the client's address they
audit, so HTTP and gRPC share one policy, one audit log and one set of refusals.

An API key is exchanged for a token as the SDK does (the gateway's `Authenticate`,
audited by auth as a login) and the token kept for the next requests with that
key until shortly before it expires. A key disabled, rotated or deleted since is
refused by the token check itself (`tamto_common.guard`), and its cached token
dropped at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tamto_common.errors import Unauthenticated
from tamto_protocol.v1 import gateway_pb2

if TYPE_CHECKING:
    from tamto_gateway.grpc_api import GatewayServicer

API_KEY_HEADER = "x-api-key"
#: A cached token is used until this long before it expires.
TOKEN_MARGIN_S = 30.0
#: Most API keys whose tokens are kept (the least recently used go first).
MAX_CACHED_KEYS = 10_000


class HttpCall:
    """The part of a gRPC call the gateway's handlers read, for an HTTP request."""

    def __init__(self, metadata: tuple[tuple[str, str], ...], peer: str) -> None:
        self._metadata = metadata
        self._peer = peer

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def peer(self) -> str:
        return self._peer


def peer_of(client: tuple[str, int] | None) -> str:
    """The address audited for an HTTP client (`http:<host>:<port>`)."""
    return "http:unknown" if client is None else f"http:{client[0]}:{client[1]}"


class Credentials:
    """Turns a request's credentials into an `HttpCall` (module docstring)."""

    def __init__(self, servicer: GatewayServicer) -> None:
        self._servicer = servicer
        self._tokens: OrderedDict[bytes, tuple[str, float]] = OrderedDict()
        self._logins: dict[bytes, asyncio.Future[str]] = {}

    async def call(self, headers: Mapping[str, str], peer: str) -> HttpCall:
        """The call for a request with these headers; no credential at all is left to
        the gateway's check (refused there, and audited, as a gRPC call without one)."""
        authorization = headers.get("authorization", "").strip() or None
        api_key = headers.get(API_KEY_HEADER, "").strip() or None
        if authorization is not None and api_key is not None:
            raise Unauthenticated("send either Authorization or X-Api-Key, not both")
        if api_key is not None:
            authorization = f"Bearer {await self._token(api_key, peer)}"
        metadata = () if authorization is None else (("authorization", authorization),)
        return HttpCall(metadata, peer)

    async def _token(self, api_key: str, peer: str) -> str:
        digest = hashlib.sha256(api_key.encode()).digest()
        cached = self._tokens.get(digest)
        if cached is not None and cached[1] - TOKEN_MARGIN_S > time.time():
            self._tokens.move_to_end(digest)
            return cached[0]
        # One login per key at a time: a crowd of clients with one key (devices
        # reconnecting together) waits for it, instead of each calling auth.
        login = self._logins.get(digest)
        if login is None:
            login = asyncio.ensure_future(self._login(digest, api_key, peer))
            self._logins[digest] = login
            login.add_done_callback(lambda _: self._logins.pop(digest, None))
        return await asyncio.shield(login)

    async def _login(self, digest: bytes, api_key: str, peer: str) -> str:
        response = await self._servicer.Authenticate(
            gateway_pb2.AuthenticateRequest(api_key=api_key), HttpCall((), peer)
        )
        self._tokens[digest] = (response.token, float(response.expires_at_unix))
        while len(self._tokens) > MAX_CACHED_KEYS:
            self._tokens.popitem(last=False)
        return str(response.token)

    def forget(self, headers: Mapping[str, str]) -> None:
        """Drop the token cached for this request's API key (it was refused)."""
        api_key = headers.get(API_KEY_HEADER)
        if api_key is not None:
            self._tokens.pop(hashlib.sha256(api_key.strip().encode()).digest(), None)
