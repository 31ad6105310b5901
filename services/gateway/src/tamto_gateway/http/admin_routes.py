"""Stream and subscription administration over HTTP: each route is the gRPC admin call
of the same name (same authorization, audit and statuses), its request read from the
path, query and JSON body, its answer the call's message as JSON (`proto_json`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from google.protobuf.message import Message
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tamto_common.errors import InvalidArgument
from tamto_gateway.http.auth import HttpCall
from tamto_gateway.http.endpoints import Deps, endpoint, int_param, json_body
from tamto_gateway.http.message_json import delivered, received_json
from tamto_gateway.http.proto_json import from_json, to_json
from tamto_protocol.v1 import gateway_pb2, messages_pb2

#: Admin routes: (method, path, the servicer's method, how a request is read).
Reader = Callable[[Request, Deps], Awaitable[Message]]


async def _stream_name(request: Request, _: Deps) -> Message:
    return gateway_pb2.DescribeStreamRequest(name=request.path_params["stream"])


async def _ensure(request: Request, deps: Deps) -> Message:
    body = await json_body(request, deps.max_body_bytes, optional=True)
    config = from_json(body or {}, messages_pb2.StreamConfig(), "stream config")
    overwrite = request.query_params.get("overwrite", "false")
    if overwrite not in ("true", "false"):
        raise InvalidArgument(f"overwrite must be true or false, got {overwrite!r}")
    return gateway_pb2.EnsureStreamRequest(
        name=request.path_params["stream"], config=config, overwrite=overwrite == "true"
    )


async def _delete_stream(request: Request, _: Deps) -> Message:
    return gateway_pb2.DeleteStreamRequest(name=request.path_params["stream"])


async def _list_subscriptions(request: Request, _: Deps) -> Message:
    return gateway_pb2.ListSubscriptionsRequest(stream=request.path_params["stream"])


async def _subscription(request: Request, _: Deps) -> Message:
    return gateway_pb2.DescribeSubscriptionRequest(
        stream=request.path_params["stream"], subscription=request.path_params["subscription"]
    )


async def _delete_subscription(request: Request, _: Deps) -> Message:
    return gateway_pb2.DeleteSubscriptionRequest(
        stream=request.path_params["stream"], subscription=request.path_params["subscription"]
    )


async def _seek(request: Request, deps: Deps) -> Message:
    body = await json_body(request, deps.max_body_bytes)
    if isinstance(body, dict) and ({"stream", "subscription"} & set(body)):
        raise InvalidArgument("the stream and subscription are named by the path, not the body")
    seek = from_json(body, gateway_pb2.SeekSubscriptionRequest(), "seek")
    seek.stream = request.path_params["stream"]
    seek.subscription = request.path_params["subscription"]
    return seek


async def _list_streams(_: Request, __: Deps) -> Message:
    return gateway_pb2.ListStreamsRequest()


async def _whoami(_: Request, __: Deps) -> Message:
    return gateway_pb2.WhoAmIRequest()


ADMIN: tuple[tuple[str, str, str, Reader], ...] = (
    ("GET", "/v1/streams", "ListStreams", _list_streams),
    ("PUT", "/v1/streams/{stream}", "EnsureStream", _ensure),
    ("GET", "/v1/streams/{stream}", "DescribeStream", _stream_name),
    ("DELETE", "/v1/streams/{stream}", "DeleteStream", _delete_stream),
    ("GET", "/v1/streams/{stream}/stats", "DescribeStreamStats", _stream_name),
    ("GET", "/v1/streams/{stream}/subscriptions", "ListSubscriptions", _list_subscriptions),
    (
        "GET",
        "/v1/streams/{stream}/subscriptions/{subscription}",
        "DescribeSubscription",
        _subscription,
    ),
    (
        "DELETE",
        "/v1/streams/{stream}/subscriptions/{subscription}",
        "DeleteSubscription",
        _delete_subscription,
    ),
    ("POST", "/v1/streams/{stream}/subscriptions/{subscription}/seek", "SeekSubscription", _seek),
    ("GET", "/v1/whoami", "WhoAmI", _whoami),
)


def _admin_route(deps: Deps, method: str, path: str, rpc: str, reader: Reader) -> Route:
    async def handle(request: Request) -> Response:
        call = await deps.call(request)
        message = await reader(request, deps)
        answer = await getattr(deps.servicer, rpc)(message, call)
        status = 201 if rpc == "EnsureStream" and answer.created else 200
        return JSONResponse(to_json(answer), status_code=status)

    handle.__name__ = rpc
    return Route(path, endpoint(deps, handle), methods=[method])


def admin_routes(deps: Deps) -> list[Route]:
    routes = [_admin_route(deps, *entry) for entry in ADMIN]

    async def peek(request: Request) -> Response:
        """Stored messages by offset, without a subscription (GetMessages)."""
        call: HttpCall = await deps.call(request)
        answer = await deps.servicer.GetMessages(
            gateway_pb2.GetMessagesRequest(
                stream=request.path_params["stream"],
                partition=int_param(request, "partition", 0, 0, 2**31),
                offset=int_param(request, "offset", 0, 0, 2**62),
                count=int_param(request, "count", 1, 1, 1000),
            ),
            call,
        )
        partition = int_param(request, "partition", 0, 0, 2**31)
        messages: list[dict[str, Any]] = []
        for batch in answer.batches:
            delivery = messages_pb2.Delivery(partition=partition, batch=batch)
            messages += [received_json(m) for m in delivered(delivery)]
        return JSONResponse({"messages": messages})

    routes.append(Route("/v1/streams/{stream}/messages", endpoint(deps, peek), methods=["GET"]))
    return routes
