"""The HTTP API's JSON: the gRPC contract's messages both ways and their schemas, the
message payload forms, and the one gRPC-to-HTTP status table."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import grpc
import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from starlette.routing import Route

from tamto_common.errors import InvalidArgument, NotFound, ResourceExhausted
from tamto_gateway.http.app import make_app
from tamto_gateway.http.consumers import Consumers, HttpConsumer
from tamto_gateway.http.endpoints import Deps
from tamto_gateway.http.message_json import outgoing_message, payload_json
from tamto_gateway.http.openapi import openapi_document
from tamto_gateway.http.problems import HTTP_STATUS, problem_for
from tamto_gateway.http.proto_json import from_json, schema, to_json
from tamto_protocol.v1 import gateway_pb2, messages_pb2


def conforms(message: Any) -> dict[str, Any]:
    """`to_json(message)`, asserted valid against `schema` of its descriptor."""
    schemas: dict[str, Any] = {}
    ref = schema(message.DESCRIPTOR, schemas)
    document = {"components": {"schemas": schemas}}
    registry: Registry[Any] = Registry().with_resource(
        "urn:doc", Resource.from_contents(document, default_specification=DRAFT202012)
    )
    answer = to_json(message)
    Draft202012Validator({"$ref": "urn:doc" + ref["$ref"]}, registry=registry).validate(answer)
    return answer


def test_admin_answers_conform_to_their_schemas_and_read_back() -> None:
    info = gateway_pb2.SubscriptionInfo(
        stream="s",
        subscription="sub",
        partitions=[
            messages_pb2.SubscriptionPartition(
                partition=1,
                exists=True,
                ack_floor=2**40,
                type=messages_pb2.SUBSCRIPTION_TYPE_SHARED,
                consumers=[messages_pb2.SubscriptionConsumer(name="c", credits=-3)],
            )
        ],
    )
    answer = conforms(info)
    assert answer["partitions"][0]["ack_floor"] == 2**40  # a number, not a string
    assert answer["partitions"][0]["type"] == "SUBSCRIPTION_TYPE_SHARED"
    assert from_json(answer, gateway_pb2.SubscriptionInfo(), "info") == info
    seek = gateway_pb2.SeekSubscriptionRequest(stream="s", offsets={0: 5, 3: 9})
    assert conforms(seek)["offsets"] == {"0": 5, "3": 9}
    assert "target" not in conforms(seek), "an unset message field is left out"
    config = messages_pb2.StreamConfig(partitions=3, durability=messages_pb2.DURABILITY_INTERVAL)
    conforms(gateway_pb2.EnsureStreamResponse(stream=messages_pb2.StreamInfo(config=config)))
    conforms(gateway_pb2.WhoAmIResponse(subject="me", roles=["r"]))
    conforms(gateway_pb2.StreamStats(partitions=[messages_pb2.PartitionStats(publish_rate=1.5)]))


def test_a_body_with_an_unknown_member_or_bad_value_is_refused() -> None:
    with pytest.raises(InvalidArgument, match=r'stream config: .*no field named "partition"'):
        from_json({"partition": 1}, messages_pb2.StreamConfig(), "stream config")
    with pytest.raises(InvalidArgument, match="stream config"):
        from_json({"partitions": "many"}, messages_pb2.StreamConfig(), "stream config")
    with pytest.raises(InvalidArgument, match="must be a JSON object"):
        from_json([1], messages_pb2.StreamConfig(), "stream config")


def test_payloads_are_value_text_or_base64_both_ways() -> None:
    assert payload_json(b'{"a": [1]}') == {"value": {"a": [1]}}
    assert payload_json(b"plain words") == {"text": "plain words"}
    assert payload_json(b"\xff\x00") == {"base64": "/wA="}
    assert outgoing_message({"value": {"a": 1}}, "line 1").payload == b'{"a":1}'
    assert outgoing_message({"base64": "/wA=", "key": "k"}, "line 1").payload == b"\xff\x00"
    with pytest.raises(InvalidArgument, match="line 2: a message needs exactly one of"):
        outgoing_message({"value": 1, "text": "x"}, "line 2")
    with pytest.raises(InvalidArgument, match="line 3: unknown member 'payload'"):
        outgoing_message({"payload": "x"}, "line 3")
    with pytest.raises(InvalidArgument, match="line 4: base64 is not valid base64"):
        outgoing_message({"base64": "!!"}, "line 4")
    with pytest.raises(InvalidArgument, match="partition must be an integer >= 0"):
        outgoing_message({"text": "x", "partition": -1}, "line 5")


def test_every_grpc_status_has_an_http_status() -> None:
    assert set(HTTP_STATUS) == set(grpc.StatusCode)
    problem = problem_for(NotFound("stream 'x' does not exist"))
    assert (problem.status, problem.code) == (404, "NOT_FOUND")
    assert problem.body()["title"] == "Not Found"
    hidden = problem_for(RuntimeError("a secret detail"))
    assert (hidden.status, hidden.code, hidden.detail) == (500, "INTERNAL", "internal error")


def test_every_route_served_is_in_the_openapi_document_and_back() -> None:
    app = make_app(cast(Deps, SimpleNamespace()))
    served = {
        (route.path, method.lower())
        for route in app.routes
        if isinstance(route, Route) and route.path != "/openapi.json"
        for method in route.methods or ()
        if method != "HEAD"
    }
    document = openapi_document()
    described = {
        (path, method)
        for path, item in document["paths"].items()
        for method in item
        if method != "parameters"
    }
    assert served == described
    Draft202012Validator.check_schema(document["components"]["schemas"]["Message"])


async def test_consumers_are_only_their_identitys_and_bounded_in_number() -> None:
    consumers = Consumers(idle_s=60, most=2)
    for name in ("a", "b"):
        consumers.check_room()
        consumers.add(cast(HttpConsumer, SimpleNamespace(id=name, subject="alice", pinned=False)))
    with pytest.raises(ResourceExhausted, match="--http-max-consumers"):
        consumers.check_room()
    assert consumers.get("a", "alice").id == "a"
    with pytest.raises(NotFound):
        consumers.get("a", "mallory")
