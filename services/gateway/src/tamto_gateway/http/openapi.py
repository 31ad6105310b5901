"""The OpenAPI 3.1 document of the HTTP API, served at `/openapi.json`.

Written beside the routes it describes; the admin answers' schemas come from the
same protobuf descriptors their JSON is made from (`proto_json.schema`), and a test
validates real answers against this document.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

from tamto_gateway.http.message_json import MESSAGE_FIELDS
from tamto_gateway.http.problems import PROBLEM_JSON
from tamto_gateway.http.proto_json import Descriptor, schema
from tamto_gateway.http.publish import ARROW_STREAM, NDJSON
from tamto_gateway.http.transports import CONSUMER, SUBSCRIPTION, TYPES
from tamto_protocol.v1 import gateway_pb2, messages_pb2

JSON = "application/json"
Schema = dict[str, Any]


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


#: A count, partition or offset.
_INTEGER = {"type": "integer", "minimum": 0}


def _payload_schemas() -> dict[str, Schema]:
    """The schemas of the data plane's bodies: messages, then positions and credit."""
    return {**_message_schemas(), **_position_schemas()}


def _message_schemas() -> dict[str, Schema]:
    """A problem, and a message going out or coming in."""
    integer = dict(_INTEGER)
    payload = {
        "value": {"description": "the payload, a JSON document"},
        "text": {"type": "string", "description": "the payload, UTF-8 text"},
        "base64": {"type": "string", "contentEncoding": "base64"},
        "key": {"type": "string"},
        "key_base64": {"type": "string", "contentEncoding": "base64"},
        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
        "id": {"type": "string"},
        "event_time_us": {"type": "integer"},
    }
    return {
        "Problem": {
            "type": "object",
            "required": ["type", "title", "status", "detail", "code"],
            "properties": {
                "type": {"type": "string"},
                "title": {"type": "string"},
                "status": {"type": "integer"},
                "detail": {"type": "string"},
                "code": {"type": "string", "description": "the gRPC status name"},
            },
        },
        "OutgoingMessage": {
            "type": "object",
            "additionalProperties": False,
            "properties": {**payload, "partition": integer},
        },
        "Message": {
            "type": "object",
            "additionalProperties": False,
            "required": ["partition", "offset", "delivery_count", "publish_time_us", "headers"],
            "properties": {
                **payload,
                "partition": integer,
                "offset": integer,
                "delivery_count": integer,
                "publish_time_us": {"type": "integer"},
                "producer": {"type": "string"},
            },
        },
        "Messages": {
            "type": "object",
            "required": ["messages"],
            "properties": {"messages": {"type": "array", "items": _ref("Message")}},
        },
    }


def _position_schemas() -> dict[str, Schema]:
    """Where messages are (acks, nacks, what was published), credit, a consumer."""
    integer = dict(_INTEGER)
    position = {
        "type": "object",
        "required": ["partition", "offset"],
        "properties": {"partition": integer, "offset": integer},
    }
    return {
        "Position": position,
        "Positions": {
            "type": "object",
            "required": ["messages"],
            "properties": {
                "messages": {"type": "array", "minItems": 1, "items": position},
                "delay_ms": {"type": "integer", "minimum": 0, "description": "nack only"},
            },
        },
        "Credit": {
            "type": "object",
            "required": ["messages"],
            "properties": {"messages": {"type": "integer", "minimum": 1}},
        },
        "Published": {
            "type": "object",
            "required": ["stream", "count", "messages"],
            "properties": {
                "stream": {"type": "string"},
                "count": integer,
                "messages": {"type": "array", "items": position},
            },
        },
        "Consumer": {
            "type": "object",
            "required": ["consumer_id", "stream", "subscription"],
            "properties": {
                n: {"type": "string"} for n in ("consumer_id", "stream", "subscription")
            },
        },
    }


def _json(schema_: Schema) -> dict[str, Any]:
    return {"content": {JSON: {"schema": schema_}}}


def _op(summary: str, status: int, answer: Schema | None, **extra: Any) -> dict[str, Any]:
    ok: dict[str, Any] = {"description": "OK"}
    if answer is not None:
        ok.update(_json(answer))
    problem = {"description": "a problem", "content": {PROBLEM_JSON: {"schema": _ref("Problem")}}}
    return {"summary": summary, "responses": {str(status): ok, "default": problem}, **extra}


def _param(name: str, where: str, kind: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": where == "path",
        "schema": {"type": kind},
        "description": description,
    }


_STREAM = _param("stream", "path", "string", "the stream")
_SUB = _param("subscription", "path", "string", "the subscription")
_CONSUMER = _param("consumer", "path", "string", "a consumer id")
_SUBSCRIBE = [
    _STREAM,
    _SUB,
    {
        **_param("type", "query", "string", "subscription type"),
        "schema": {"type": "string", "enum": list(TYPES)},
    },
    _param("start", "query", "string", "earliest, latest (default) or an offset"),
    _param("partitions", "query", "string", "partitions to read, comma-separated (default all)"),
    _param("consumer_name", "query", "string", "shown by DescribeSubscription"),
]


def _consume_paths() -> dict[str, Any]:
    credits = _param("credits", "query", "integer", "messages granted at the start (100)")
    positions = {"required": True, **_json(_ref("Positions"))}
    return {
        f"{SUBSCRIPTION}/consumers": {
            "post": _op(
                "Open a consumer for long polls", 201, _ref("Consumer"), parameters=_SUBSCRIBE
            )
        },
        f"{SUBSCRIPTION}/events": {
            "get": {
                **_op(
                    "Consume as server-sent events", 200, None, parameters=[*_SUBSCRIBE, credits]
                ),
                "responses": {
                    "200": {
                        "description": "events: consumer, messages, error",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    },
                },
            }
        },
        f"{CONSUMER}/messages": {
            "get": _op(
                "Long poll for messages",
                200,
                _ref("Messages"),
                parameters=[
                    _CONSUMER,
                    _param("max_messages", "query", "integer", "at most this many (100)"),
                    _param("wait_ms", "query", "integer", "wait this long for the first (0)"),
                ],
            )
        },
        f"{CONSUMER}/ack": {
            "post": _op("Ack messages", 204, None, parameters=[_CONSUMER], requestBody=positions)
        },
        f"{CONSUMER}/nack": {
            "post": _op("Nack messages", 204, None, parameters=[_CONSUMER], requestBody=positions)
        },
        f"{CONSUMER}/credit": {
            "post": _op(
                "Grant credit",
                204,
                None,
                parameters=[_CONSUMER],
                requestBody={"required": True, **_json(_ref("Credit"))},
            )
        },
        CONSUMER: {"delete": _op("Close a consumer", 204, None, parameters=[_CONSUMER])},
    }


def _admin_paths(schemas: dict[str, Schema]) -> dict[str, Any]:
    def answer(descriptor: Descriptor) -> Schema:
        return schema(descriptor, schemas)

    seek = copy.deepcopy(schemas[gateway_pb2.SeekSubscriptionRequest.DESCRIPTOR.name])
    for named_by_path in ("stream", "subscription"):
        del seek["properties"][named_by_path]
    schemas["SeekBody"] = seek
    stream_info = answer(messages_pb2.StreamInfo.DESCRIPTOR)
    ensure = _op(
        "Ensure a stream (201: created, 200: it existed)",
        200,
        answer(gateway_pb2.EnsureStreamResponse.DESCRIPTOR),
        parameters=[_param("overwrite", "query", "boolean", "apply differences")],
        requestBody=_json(answer(messages_pb2.StreamConfig.DESCRIPTOR)),
    )
    ensure["responses"]["201"] = {**ensure["responses"]["200"], "description": "Created"}
    info = answer(gateway_pb2.SubscriptionInfo.DESCRIPTOR)
    return {
        "/v1/streams": {
            "get": _op("List streams", 200, answer(gateway_pb2.ListStreamsResponse.DESCRIPTOR))
        },
        "/v1/streams/{stream}": {
            "parameters": [_STREAM],
            "get": _op("Describe a stream", 200, stream_info),
            "put": ensure,
            "delete": _op(
                "Delete a stream", 200, answer(gateway_pb2.DeleteStreamResponse.DESCRIPTOR)
            ),
        },
        "/v1/streams/{stream}/stats": {
            "get": _op(
                "Stream statistics",
                200,
                answer(gateway_pb2.StreamStats.DESCRIPTOR),
                parameters=[_STREAM],
            )
        },
        "/v1/streams/{stream}/subscriptions": {
            "get": _op(
                "List subscriptions",
                200,
                answer(gateway_pb2.ListSubscriptionsResponse.DESCRIPTOR),
                parameters=[_STREAM],
            )
        },
        SUBSCRIPTION: {
            "parameters": [_STREAM, _SUB],
            "get": _op("Describe a subscription", 200, info),
            "delete": _op(
                "Delete a subscription",
                200,
                answer(gateway_pb2.DeleteSubscriptionResponse.DESCRIPTOR),
            ),
        },
        f"{SUBSCRIPTION}/seek": {
            "post": _op(
                "Move a subscription's cursor",
                200,
                info,
                parameters=[_STREAM, _SUB],
                requestBody={"required": True, **_json(_ref("SeekBody"))},
            )
        },
        "/v1/whoami": {
            "get": _op(
                "Who the credentials speak for", 200, answer(gateway_pb2.WhoAmIResponse.DESCRIPTOR)
            )
        },
    }


def _messages_path() -> dict[str, Any]:
    body = {
        "required": True,
        "content": {
            JSON: {"schema": {"description": "the payload of one message"}},
            NDJSON: {
                "schema": {"type": "string", "description": "one OutgoingMessage object per line"}
            },
            ARROW_STREAM: {"schema": {"type": "string", "format": "binary"}},
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
        },
    }
    return {
        "/v1/streams/{stream}/messages": {
            "parameters": [_STREAM],
            "post": _op(
                "Publish; answered once durable",
                200,
                _ref("Published"),
                requestBody=body,
                parameters=[
                    _param("partition", "query", "integer", "the partition"),
                    _param("key", "query", "string", "a single message's key"),
                    _param("id", "query", "string", "a single message's id"),
                ],
            ),
            "get": _op(
                "Read stored messages by offset",
                200,
                _ref("Messages"),
                parameters=[
                    _param("partition", "query", "integer", "the partition (0)"),
                    _param("offset", "query", "integer", "the first offset (0)"),
                    _param("count", "query", "integer", "how many, 1-1000 (1)"),
                ],
            ),
        }
    }


@cache
def openapi_document() -> dict[str, Any]:
    """The document (built once)."""
    schemas: dict[str, Schema] = _payload_schemas()
    assert set(schemas["OutgoingMessage"]["properties"]) == MESSAGE_FIELDS
    schema(gateway_pb2.SeekSubscriptionRequest.DESCRIPTOR, schemas)
    paths = {**_messages_path(), **_consume_paths(), **_admin_paths(schemas)}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Tamto HTTP API",
            "version": "1",
            "description": (
                "Tamto's gateway over HTTP/JSON (docs/http.md). Not described here, as "
                "OpenAPI has no WebSockets: GET /v1/streams/{stream}/subscriptions/"
                "{subscription}/ws consumes over a WebSocket (docs/http.md)."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "X-Api-Key"},
            },
        },
        "security": [{"bearer": []}, {"apiKey": []}],
    }
