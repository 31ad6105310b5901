"""Consuming over HTTP: three transports over one kind of session (`consumers`).

- Long poll: `POST .../consumers` opens a session; `GET /v1/consumers/{id}/messages`
  waits up to `wait_ms` for up to `max_messages` (granting that much credit: a pull);
  acks, nacks, credits and the close are requests of their own.
- Server-sent events: `GET .../events` opens a session for the life of the response:
  first a `consumer` event naming it (acks, nacks and more credit are then posted to
  `/v1/consumers/{id}/...`), then a `messages` event per delivery, and an `error`
  event (a problem) if the session fails.
- WebSocket: `.../ws`, the same events as JSON frames, and the client's acks, nacks,
  credits and close as frames on the same socket.
SSE and WebSocket sessions start with `credits` (default 100) and get more only when
the client grants them. A session is opened with the subscribe options as query
parameters (`type`, `start`, `partitions`, `consumer_name`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tamto_common.errors import InvalidArgument
from tamto_common.names import check_name
from tamto_common.policy import Permission
from tamto_gateway.http.consumers import HttpConsumer
from tamto_gateway.http.endpoints import Deps, endpoint, int_param, json_body
from tamto_gateway.http.message_json import positions, received_json
from tamto_gateway.http.problems import problem_for
from tamto_protocol.v1 import messages_pb2

SUBSCRIPTION = "/v1/streams/{stream}/subscriptions/{subscription}"
CONSUMER = "/v1/consumers/{consumer}"
#: SSE comment lines sent this often on an idle stream (proxies close silent ones).
KEEPALIVE_S = 15.0
MAX_CREDITS = 100_000
TYPES = {
    "exclusive": messages_pb2.SUBSCRIPTION_TYPE_EXCLUSIVE,
    "failover": messages_pb2.SUBSCRIPTION_TYPE_FAILOVER,
    "shared": messages_pb2.SUBSCRIPTION_TYPE_SHARED,
    "key_shared": messages_pb2.SUBSCRIPTION_TYPE_KEY_SHARED,
    "multicast": messages_pb2.SUBSCRIPTION_TYPE_MULTICAST,
}


def subscribe_of(connection: HTTPConnection) -> messages_pb2.Subscribe:
    """The subscribe a session opens with, from the path and query."""
    query = connection.query_params
    sub = messages_pb2.Subscribe(
        stream=connection.path_params["stream"],
        subscription=connection.path_params["subscription"],
        consumer_name=query.get("consumer_name", ""),
    )
    kind = query.get("type", "exclusive")
    if kind not in TYPES:
        raise InvalidArgument(f"type must be one of {', '.join(TYPES)}, got {kind!r}")
    sub.type = TYPES[kind]
    start = query.get("start", "latest")
    if start in ("earliest", "latest"):
        setattr(sub.start, start, True)
    elif start.isdigit():
        sub.start.offset = int(start)
    else:
        raise InvalidArgument(f"start must be earliest, latest or an offset, got {start!r}")
    listed = query.get("partitions", "")
    for part in filter(None, listed.split(",")):
        if not part.strip().isdigit():
            raise InvalidArgument(f"partitions must be integers separated by commas: {listed!r}")
        sub.partitions.append(int(part))
    return sub


async def open_consumer(deps: Deps, connection: HTTPConnection) -> HttpConsumer:
    """A session for the connection's identity. What the gateway can refuse at once
    (credentials, permission, an unknown stream) is refused before it starts."""
    sub = subscribe_of(connection)
    call = await deps.call(connection)
    principal = await deps.principal(call, "Consume")
    check_name("stream", sub.stream)
    check_name("subscription", sub.subscription)
    await deps.guard.require(principal, Permission.CONSUME, sub.stream, call.peer(), "Consume")
    await deps.streams.describe(sub.stream)
    deps.consumers.check_room()
    consumer = HttpConsumer(deps.servicer, call, sub, principal.subject)
    deps.consumers.add(consumer)
    return consumer


async def _owned(deps: Deps, request: Request) -> HttpConsumer:
    principal = await deps.principal(await deps.call(request), "Consume")
    return deps.consumers.get(request.path_params["consumer"], principal.subject)


def long_poll_routes(deps: Deps) -> list[BaseRoute]:
    async def create(request: Request) -> Response:
        consumer = await open_consumer(deps, request)
        return JSONResponse(_consumer_json(consumer), status_code=201)

    async def messages(request: Request) -> Response:
        consumer = await _owned(deps, request)
        max_messages = int_param(request, "max_messages", 100, 1, 10_000)
        wait_ms = int_param(request, "wait_ms", 0, 0, int(deps.max_wait_s * 1000))
        consumer.pinned = True  # not idle while a poll waits
        try:
            got = await consumer.pull(max_messages, wait_ms / 1000)
        except Exception:
            deps.consumers.remove_soon(consumer)  # its session failed: it is gone
            raise
        finally:
            consumer.pinned = False
            deps.consumers.touch(consumer)
        return JSONResponse({"messages": [received_json(m) for m in got]})

    async def ack(request: Request) -> Response:
        consumer = await _owned(deps, request)
        consumer.ack(positions(await json_body(request, deps.max_body_bytes)))
        return Response(status_code=204)

    async def nack(request: Request) -> Response:
        consumer = await _owned(deps, request)
        body = await json_body(request, deps.max_body_bytes)
        consumer.nack(positions(body), _delay_ms(body))
        return Response(status_code=204)

    async def credit(request: Request) -> Response:
        consumer = await _owned(deps, request)
        consumer.credit(_credit(await json_body(request, deps.max_body_bytes)))
        return Response(status_code=204)

    async def close(request: Request) -> Response:
        await deps.consumers.remove(await _owned(deps, request))
        return Response(status_code=204)

    def route(path: str, handler: Any, method: str) -> Route:
        return Route(path, endpoint(deps, handler), methods=[method])

    return [
        route(f"{SUBSCRIPTION}/consumers", create, "POST"),
        route(f"{CONSUMER}/messages", messages, "GET"),
        route(f"{CONSUMER}/ack", ack, "POST"),
        route(f"{CONSUMER}/nack", nack, "POST"),
        route(f"{CONSUMER}/credit", credit, "POST"),
        route(CONSUMER, close, "DELETE"),
    ]


def _consumer_json(consumer: HttpConsumer) -> dict[str, str]:
    return {
        "consumer_id": consumer.id,
        "stream": consumer.stream,
        "subscription": consumer.subscription,
    }


def _delay_ms(body: object) -> int:
    delay = body.get("delay_ms", 0) if isinstance(body, dict) else 0
    if not isinstance(delay, int) or isinstance(delay, bool) or not 0 <= delay < 2**32:
        raise InvalidArgument(f"delay_ms must be an integer 0-{2**32 - 1}")
    return delay


def _credit(body: object) -> int:
    count = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_CREDITS:
        raise InvalidArgument(f'the body needs "messages": an integer 1-{MAX_CREDITS}')
    return count


def sse_routes(deps: Deps) -> list[BaseRoute]:
    async def events(request: Request) -> Response:
        credits = int_param(request, "credits", 100, 1, MAX_CREDITS)
        consumer = await open_consumer(deps, request)
        consumer.pinned = True
        consumer.credit(credits)
        return StreamingResponse(
            _sse(deps, consumer),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    return [Route(f"{SUBSCRIPTION}/events", endpoint(deps, events), methods=["GET"])]


def _event(kind: str, data: dict[str, Any]) -> str:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def _sse(deps: Deps, consumer: HttpConsumer) -> AsyncIterator[str]:
    """The events of an SSE session; it is closed when the client goes away."""
    try:
        yield _event("consumer", _consumer_json(consumer))
        while True:
            try:
                await consumer.wait(KEEPALIVE_S)
            except Exception as exc:
                yield _event("error", problem_for(exc).body())
                return
            got = consumer.take()
            if got:
                yield _event("messages", {"messages": [received_json(m) for m in got]})
            else:
                yield ": keep-alive\n\n"
    finally:  # also when cancelled (the client went away): the close cannot be awaited here
        deps.consumers.remove_soon(consumer)


def ws_routes(deps: Deps) -> list[BaseRoute]:
    async def socket(websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            credits = int_param(websocket, "credits", 100, 0, MAX_CREDITS)
            consumer = await open_consumer(deps, websocket)
        except Exception as exc:
            await _ws_fail(websocket, exc)
            return
        consumer.pinned = True
        consumer.credit(credits)
        try:
            await websocket.send_json({"type": "consumer", **_consumer_json(consumer)})
            await _ws_serve(websocket, consumer)
        except WebSocketDisconnect:
            pass
        finally:
            deps.consumers.remove_soon(consumer)

    return [WebSocketRoute(f"{SUBSCRIPTION}/ws", socket)]


async def _ws_fail(websocket: WebSocket, exc: BaseException) -> None:
    """Send the problem as the last frame and close with 4000 + its HTTP status."""
    problem = problem_for(exc)
    await websocket.send_json({"type": "error", "problem": problem.body()})
    await websocket.close(code=4000 + problem.status, reason=problem.code[:100])


async def _ws_serve(websocket: WebSocket, consumer: HttpConsumer) -> None:
    """Deliveries out and the client's frames in, until either side ends."""
    reader = asyncio.create_task(_ws_read(websocket, consumer))
    try:
        while not reader.done():
            waiter = asyncio.create_task(consumer.wait(None))
            await asyncio.wait({waiter, reader}, return_when=asyncio.FIRST_COMPLETED)
            if not waiter.done():
                waiter.cancel()
                break
            try:
                waiter.result()
            except Exception as exc:
                await _ws_fail(websocket, exc)
                return
            got = consumer.take()
            if got:
                await websocket.send_json(
                    {"type": "messages", "messages": [received_json(m) for m in got]}
                )
        failure = reader.exception() if reader.done() else None
        if failure is not None and not isinstance(failure, WebSocketDisconnect):
            await _ws_fail(websocket, failure)
    finally:
        reader.cancel()


async def _ws_read(websocket: WebSocket, consumer: HttpConsumer) -> None:
    """The client's frames: `{"credit": n}`, `{"ack": [...]}`, `{"nack": [...],
    "delay_ms": n}` or `{"close": true}` (then the socket is closed by the server)."""
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", 1000))
        if message.get("text") is None:
            raise InvalidArgument("a frame must be JSON text, not binary")
        try:
            frame = json.loads(message["text"])
        except ValueError as exc:
            raise InvalidArgument(f"a frame is not valid JSON: {exc}") from None
        if not isinstance(frame, dict):
            raise InvalidArgument("a frame must be a JSON object")
        if "credit" in frame:
            consumer.credit(_credit({"messages": frame["credit"]}))
        elif "ack" in frame:
            consumer.ack(positions({"messages": frame["ack"]}))
        elif "nack" in frame:
            consumer.nack(positions({"messages": frame["nack"]}), _delay_ms(frame))
        elif frame.get("close") is True:
            await consumer.close()
            await websocket.close(code=1000)
            return
        else:
            raise InvalidArgument("a frame must hold credit, ack, nack or close")
