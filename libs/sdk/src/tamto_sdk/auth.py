"""Token handling: exchange the API key for a bearer token and keep it fresh."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc

from tamto_protocol.v1 import gateway_pb2
from tamto_sdk._retry import with_retries
from tamto_sdk.errors import from_rpc_error
from tamto_sdk.options import ClientOptions

__all__ = ["Metadata", "TokenAuth"]

Metadata = tuple[tuple[str, str], ...]


class TokenAuth:
    """Holds the current bearer token and renews it before it expires.

    Renewal is lazy and single-flight: the first call that finds the token within
    `ClientOptions.token_refresh_margin_s` of expiry re-authenticates, the others
    wait for it. A call refused with UNAUTHENTICATED asks for one forced renewal
    through `renew_after_rejection`.
    """

    def __init__(self, stub: Any, api_key: str, options: ClientOptions) -> None:
        self._stub = stub
        self._api_key = api_key
        self._options = options
        self._token: str | None = None
        self._expires_at: float = 0.0
        self._lock = asyncio.Lock()

    @property
    def expires_at(self) -> float:
        """When the current token expires (unix seconds; 0 if unknown)."""
        return self._expires_at

    @property
    def token(self) -> str | None:
        """The current token, or None before the first authentication."""
        return self._token

    async def _attempt(self) -> Any:
        try:
            return await self._stub.Authenticate(
                gateway_pb2.AuthenticateRequest(api_key=self._api_key),
                timeout=self._options.rpc_timeout_s,
            )
        except grpc.aio.AioRpcError as exc:
            raise from_rpc_error(exc) from exc

    async def authenticate_once(self) -> None:
        """Exchange the API key for a fresh token, with one attempt."""
        self._use(await self._attempt())

    async def authenticate(self) -> None:
        """Exchange the API key for a fresh token (retrying retriable failures)."""
        self._use(await with_retries(self._attempt, self._options))

    def _use(self, response: Any) -> None:
        self._token = response.token
        self._expires_at = float(response.expires_at_unix) if response.expires_at_unix else 0.0

    def _needs_renewal(self) -> bool:
        if self._token is None:
            return True
        if not self._expires_at:
            return False
        return time.time() >= self._expires_at - self._options.token_refresh_margin_s

    async def metadata(self) -> Metadata:
        """Call metadata carrying a valid bearer token, renewing it first if due."""
        if self._needs_renewal():
            async with self._lock:
                if self._needs_renewal():
                    await self.authenticate()
        return (("authorization", f"Bearer {self._token}"),)

    async def renew_after_rejection(self, rejected: Metadata) -> None:
        """Renew the token after the server refused `rejected`, unless already renewed."""
        async with self._lock:
            if rejected == (("authorization", f"Bearer {self._token}"),):
                await self.authenticate()
