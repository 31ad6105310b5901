"""What every HTTP route shares: its dependencies, error handling, body reading.

`endpoint` wraps a route's function: whatever it raises becomes problem+json
(`problems`), and a refused API key's cached token is dropped. Bodies are read
up to `max_body_bytes` and refused with 413 past it, before the rest is read.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.requests import HTTPConnection, Request
from starlette.responses import Response

from tamto_common.errors import InvalidArgument, Unauthenticated
from tamto_common.tokens import Principal
from tamto_gateway.http.auth import Credentials, HttpCall, peer_of
from tamto_gateway.http.consumers import Consumers
from tamto_gateway.http.problems import HttpProblem, problem_for
from tamto_gateway.http.publish import Publisher

if TYPE_CHECKING:
    from tamto_common.guard import Guard
    from tamto_gateway.grpc_api import GatewayServicer
    from tamto_gateway.streams import StreamRegistry

Handler = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class Deps:
    """What the routes use: the gateway's own servicer and registries."""

    servicer: GatewayServicer
    streams: StreamRegistry
    guard: Guard
    credentials: Credentials
    publisher: Publisher
    consumers: Consumers
    max_body_bytes: int
    max_wait_s: float

    async def call(self, connection: HTTPConnection) -> HttpCall:
        """The request as a gateway call (its credentials and client address)."""
        client = connection.client
        peer = peer_of(None if client is None else (client.host, client.port))
        return await self.credentials.call(connection.headers, peer)

    async def principal(self, call: HttpCall, action: str) -> Principal:
        """Who the call speaks for (UNAUTHENTICATED, audited, for no one)."""
        return await self.guard.principal(call.invocation_metadata(), call.peer(), action)


def endpoint(deps: Deps, handler: Handler) -> Handler:
    """`handler` with every error answered as problem+json."""

    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except Exception as exc:
            if isinstance(exc, Unauthenticated):
                deps.credentials.forget(request.headers)
            return problem_for(exc).response()

    wrapped.__name__ = handler.__name__
    return wrapped


def media_type(request: Request) -> str:
    """The request's content type without parameters, lower case ("" if none)."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it is known to exceed `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HttpProblem(413, f"the body of {declared} bytes exceeds the limit of {limit}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HttpProblem(413, f"the body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def json_body(request: Request, limit: int, *, optional: bool = False) -> Any:
    """The body as JSON (`application/json` only); None for an empty optional one."""
    body = await read_body(request, limit)
    if optional and not body.strip():
        return None
    if media_type(request) != "application/json":
        raise HttpProblem(415, "the body must be application/json")
    try:
        return json.loads(body)
    except ValueError as exc:
        raise InvalidArgument(f"the body is not valid JSON: {exc}") from None


def int_param(connection: HTTPConnection, name: str, default: int, low: int, high: int) -> int:
    """Query parameter `name` as an integer in [low, high]."""
    text = connection.query_params.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise InvalidArgument(f"{name} must be an integer, got {text!r}") from None
    if not low <= value <= high:
        raise InvalidArgument(f"{name} must be {low}-{high}, got {value}")
    return value
