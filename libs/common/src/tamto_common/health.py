"""Asking a Tamto process whether it serves, over the standard gRPC health service.

Shared by the launcher (waiting for each service it starts) and the CLI's `tamto status`
(which must not need the launcher's package to ask). `python -m tamto_common.health
SERVICE` is a container's health check (infra/docker/Dockerfile): it asks the process
of the same container, found from the same settings the service reads (port, advertised
host, TLS files), and exits 0 only when it serves.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping, Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tamto_common.config import ServiceConfig, load_config
from tamto_common.errors import ConfigError
from tamto_common.tls import TlsMaterial

#: Addresses a service binds that are not an address to dial.
_ANY_ADDRESS = frozenset({"0.0.0.0", "::", ""})


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


def check_address(config: ServiceConfig) -> str:
    """Where a health check of this process dials: its advertised host (what a TLS
    certificate names) or, bound to every address, loopback; ConfigError without a port."""
    if config.port == 0:
        raise ConfigError("--port", "the health check needs the service's fixed gRPC port")
    host = "127.0.0.1" if config.dial_host in _ANY_ADDRESS else config.dial_host
    return f"[{host}]:{config.port}" if ":" in host else f"{host}:{config.port}"


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """`python -m tamto_common.health SERVICE`: 0 when the service serves, 1 when it does
    not or does not answer, 2 on a bad setting; one line on stderr unless 0."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m tamto_common.health SERVICE", file=sys.stderr)
        return 2
    service = args[0]
    try:
        config = load_config(ServiceConfig, service, [], environ)
        address, tls = check_address(config), config.tls()
    except ConfigError as exc:
        print(f"{service} health check: {exc}", file=sys.stderr)
        return 2
    try:
        serving = asyncio.run(grpc_healthy(address, tls=tls))
    except grpc.RpcError as exc:
        print(f"{service} at {address}: {exc.code().name}", file=sys.stderr)
        return 1
    if not serving:
        print(f"{service} at {address}: not serving", file=sys.stderr)
    return 0 if serving else 1


if __name__ == "__main__":
    sys.exit(main())
