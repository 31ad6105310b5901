"""The publish route: `POST /v1/streams/{stream}/messages` (bodies: `publish`)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tamto_gateway.http.endpoints import Deps, endpoint, media_type, read_body
from tamto_gateway.http.model import Position
from tamto_gateway.http.publish import (
    ARROW_STREAM,
    NDJSON,
    ndjson_messages,
    query_partition,
    single_message,
)


def publish_routes(deps: Deps) -> list[Route]:
    async def publish(request: Request) -> Response:
        stream = request.path_params["stream"]
        call = await deps.call(request)
        # Authorized before the body is read: a refused caller's body is not taken.
        count = await deps.publisher.partitions(call, stream)
        body = await read_body(request, deps.max_body_bytes)
        kind = media_type(request)
        if kind == ARROW_STREAM:
            partition = query_partition(request.query_params)
            placed = await deps.publisher.publish_arrow(call, stream, body, partition, count)
        elif kind == NDJSON:
            placed = await deps.publisher.publish(call, stream, ndjson_messages(body), count)
        else:
            message = single_message(body, kind, request.query_params, request.headers)
            placed = await deps.publisher.publish(call, stream, [message], count)
        return JSONResponse(published_json(stream, placed))

    return [Route("/v1/streams/{stream}/messages", endpoint(deps, publish), methods=["POST"])]


def published_json(stream: str, placed: list[Position]) -> dict[str, object]:
    """The answer to a publish (the `Published` schema of /openapi.json)."""
    return {
        "stream": stream,
        "count": len(placed),
        "messages": [{"partition": p.partition, "offset": p.offset} for p in placed],
    }
