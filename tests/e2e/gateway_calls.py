"""Calling the gateway's gRPC API by hand, without the SDK.

The tests that send what the SDK never would (malformed batches, raw requests,
bad frames, limits) make their own stub and authenticate it the one way here.
"""

from __future__ import annotations

from tamto_protocol.v1 import gateway_pb2, gateway_pb2_grpc, messages_pb2


async def auth_metadata(stub: gateway_pb2_grpc.GatewayStub, api_key: str) -> list[tuple[str, str]]:
    """The call metadata that authenticates raw calls: a token for `api_key`, as a bearer."""
    answer = await stub.Authenticate(gateway_pb2.AuthenticateRequest(api_key=api_key))
    return [("authorization", f"Bearer {answer.token}")]


async def raw_publish(
    stub: gateway_pb2_grpc.GatewayStub,
    metadata: list[tuple[str, str]],
    stream: str,
    data: bytes,
    count: int,
) -> gateway_pb2.PublishResponse:
    """Publish `data`, declared as `count` messages, to partition 0 of `stream` by a raw
    Publish call: the gateway sees the bytes as sent."""
    request = gateway_pb2.PublishRequest(
        stream=stream, partition=0, batch=messages_pb2.RecordBatch(arrow_ipc=data, count=count)
    )
    response: gateway_pb2.PublishResponse = await stub.Publish(request, metadata=metadata)
    return response
