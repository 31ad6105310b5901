"""The Starlette application of the HTTP API: every route, and problem+json for the
errors Starlette finds itself (an unknown path, a wrong method)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from tamto_common.guard import Guard
from tamto_gateway.config import GatewayConfig
from tamto_gateway.http.admin_routes import admin_routes
from tamto_gateway.http.auth import Credentials
from tamto_gateway.http.consumers import Consumers
from tamto_gateway.http.endpoints import Deps
from tamto_gateway.http.listener import EdgeServer, edge_tls, listen
from tamto_gateway.http.openapi import openapi_document
from tamto_gateway.http.problems import problem_response
from tamto_gateway.http.publish import Publisher, warm_up
from tamto_gateway.http.publish_routes import publish_routes
from tamto_gateway.http.transports import long_poll_routes, sse_routes, ws_routes

if TYPE_CHECKING:
    from tamto_gateway.grpc_api import GatewayServicer
    from tamto_gateway.streams import StreamRegistry


async def _openapi(_: Request) -> Response:
    return JSONResponse(openapi_document())


def make_app(deps: Deps) -> Starlette:
    """The application serving `deps`' gateway."""
    routes: list[BaseRoute] = [
        Route("/openapi.json", _openapi, methods=["GET"]),
        *publish_routes(deps),
        *admin_routes(deps),
        *long_poll_routes(deps),
        *sse_routes(deps),
        *ws_routes(deps),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: problem_response})


def http_server(
    config: GatewayConfig, servicer: GatewayServicer, streams: StreamRegistry, guard: Guard
) -> tuple[EdgeServer, Consumers]:
    """The HTTP API of a gateway, bound to `--http-port` (not started), and its consumers
    (closed on shutdown)."""
    consumers = Consumers(config.http_consumer_idle_s, config.http_max_consumers)
    deps = Deps(
        servicer=servicer,
        streams=streams,
        guard=guard,
        credentials=Credentials(servicer),
        publisher=Publisher(servicer, streams, guard),
        consumers=consumers,
        max_body_bytes=config.http_max_body_bytes,
        max_wait_s=config.http_max_wait_s,
    )
    sock = listen(config.host, config.http_port)
    warm_up()
    return EdgeServer(make_app(deps), sock, edge_tls(config)), consumers
