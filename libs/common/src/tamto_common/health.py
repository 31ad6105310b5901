"""Asking a Tamto process whether it serves, over the standard gRPC health service.

Shared by the launcher (waiting for each service it starts) and the CLI's `tamto status`
(which must not need the launcher's package to ask).
"""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tamto_common.tls import TlsMaterial


async def grpc_healthy(address: str, service: str = "", tls: TlsMaterial | None = None) -> bool:
    """True when the process at `address` reports SERVING (within 1 s); gRPC errors raise."""
    channel = (
        grpc.aio.insecure_channel(address)
        if tls is None
        else grpc.aio.secure_channel(address, tls.channel_credentials())
    )
    async with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        response = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=1)
        return bool(response.status == health_pb2.HealthCheckResponse.SERVING)
