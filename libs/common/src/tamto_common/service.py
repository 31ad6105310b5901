"""The life of a service process: start, serve, register, stop gracefully.

`main` (the process edge) and `serve` are the one way a Tamto service runs.
`serve` builds the gRPC server (health service, error translation), connects
to etcd and NATS, lets the service wire its servicers and background work,
registers the instance in etcd, reports SERVING on gRPC health (only then: a
process that serves is in etcd), then waits for SIGTERM or SIGINT. Shutdown goes
in order: report NOT_SERVING, deregister (peers stop routing here), stop
accepting and drain in-flight calls for the grace period, close the service's
own resources, then the bus and etcd.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any, TypeVar

import aetcd
import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from nats.aio.client import Client as NatsClient

from tamto_common.bus import connect_bus, publish_event
from tamto_common.channels import SERVER_OPTIONS, use_tls_for_peers
from tamto_common.cluster_credential import CredentialRefused, admit
from tamto_common.config import ServiceConfig, load_config
from tamto_common.discovery import with_discovered_etcd
from tamto_common.errors import ConfigError, TamtoError
from tamto_common.grpc_errors import TranslateErrorsInterceptor
from tamto_common.logging import configure_logging
from tamto_common.membership import Member, Registration, connect_etcd
from tamto_common.memory import freeze_startup_objects, keep_freed_memory
from tamto_common.startup import until_reachable
from tamto_common.task_stacks import log_task_stacks_on_sigusr1
from tamto_common.telemetry import server_interceptors, setup_tracing, start_metrics_server
from tamto_common.tls import TlsMaterial

C = TypeVar("C", bound=ServiceConfig)
log = structlog.get_logger(__name__)


def package_version() -> str:
    try:
        return version("tamto-common")
    except PackageNotFoundError:
        return "0+unknown"


@dataclass(frozen=True)
class Runtime:
    """What a service's setup gets: its server, its peers' infrastructure, a place for cleanups."""

    service: str
    server: grpc.aio.Server
    etcd: aetcd.Client
    bus: NatsClient
    resources: contextlib.AsyncExitStack
    #: What setup learned to advertise in the membership record: "client_address"
    #: (a listener of its own for clients, bound on a free port) overrides
    #: `ServiceConfig.client_address_for`.
    advertise: dict[str, str] = field(default_factory=dict)


Setup = Callable[[C, Runtime], Awaitable[None]]


def bind(server: grpc.aio.Server, host: str, port: int, tls: TlsMaterial | None = None) -> int:
    """Listen on host:port (0: a free port), TLS with `tls`: the bound port, or
    `ConfigError` when it is taken."""
    try:
        if tls is None:
            bound = server.add_insecure_port(f"{host}:{port}")
        else:
            bound = server.add_secure_port(f"{host}:{port}", tls.server_credentials())
    except RuntimeError:
        bound = 0
    if bound == 0:
        raise ConfigError("--port", f"cannot listen on {host}:{port}: address already in use")
    return int(bound)


def new_server() -> grpc.aio.Server:
    """A gRPC server with every service's interceptors (traces, metrics, error translation)."""
    return grpc.aio.server(
        interceptors=[*server_interceptors(), TranslateErrorsInterceptor()],
        options=[*SERVER_OPTIONS, ("grpc.so_reuseport", 0)],
    )


async def serve(
    service: str, config: C, setup: Setup[C], stop: asyncio.Event | None = None
) -> None:
    """Run one service until SIGTERM/SIGINT, then shut it down in order. Given `stop`,
    until it is set instead: a process running several services stops them in its
    own order."""
    loop = asyncio.get_running_loop()
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    log_task_stacks_on_sigusr1(loop)  # an operator's view of where the service waits

    server = new_server()
    tls = config.tls()
    use_tls_for_peers(tls.channel_credentials() if tls is not None else None)
    port = bind(server, config.host, config.port, tls)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    # NOT_SERVING until registered (gRPC's health service starts with the server's ""
    # SERVING): whoever waits for SERVING must find this instance in etcd.
    health_names = ("", f"tamto.v1.{service.capitalize()}")
    for name in health_names:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    metrics_port = start_metrics_server(config.host, config.metrics_port)

    # `--discovery srv:<record>`: etcd's endpoints come from DNS.
    config = await with_discovered_etcd(config)
    # Started while etcd or NATS is down: serve as soon as they answer.
    etcd = await until_reachable("etcd", lambda: connect_etcd(config.etcd_hosts(), timeout_s=1))
    # Only with the cluster's credential does this node serve and register.
    await until_reachable("etcd", lambda: admit(etcd, config.cluster_secret))
    bus = await connect_bus(config.nats_url, name=f"tamto-{service}-{config.member_id}")
    address = f"{config.dial_host}:{port}"
    async with contextlib.AsyncExitStack() as resources:
        resources.push_async_callback(etcd.close)
        resources.push_async_callback(bus.close)
        runtime = Runtime(service, server, etcd, bus, resources)
        await setup(config, runtime)
        member = Member(
            service=service,
            instance_id=config.member_id,
            address=address,
            metrics_address=f"{config.dial_host}:{metrics_port}",
            version=package_version(),
            pid=os.getpid(),
            started_at=time.time(),
            client_address=runtime.advertise.get(
                "client_address", config.client_address_for(address)
            ),
        )
        await server.start()
        freeze_startup_objects()
        # Refreshed on a thread of its own: a saturated loop must not deregister us.
        async with Registration(etcd, member, config.lease_ttl_s, config.etcd_hosts()):
            for name in health_names:
                await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
            await publish_event(bus, "member.up", **_fields(member))
            log.info(
                "serving",
                address=member.address,
                metrics=member.metrics_address,
                tls="off" if tls is None else config.tls_client_auth,
            )
            await stop.wait()
            log.info("shutting down", grace_s=config.shutdown_grace_s)
            await health_servicer.enter_graceful_shutdown()
        # Deregistered: peers stop routing here. Drain in-flight calls, then close resources.
        await server.stop(config.shutdown_grace_s)
        with contextlib.suppress(Exception):
            await publish_event(bus, "member.down", **_fields(member))
            await bus.flush(timeout=1)
    log.info("stopped")


def _fields(member: Member) -> dict[str, object]:
    return {
        "service": member.service,
        "instance_id": member.instance_id,
        "address": member.address,
    }


#: The exit code of a node the cluster refused (`tamto_common.cluster_credential`).
REFUSED_EXIT_CODE = 3


def main(
    service: str, config_cls: type[C], setup: Setup[C], argv: Sequence[str] | None = None
) -> None:
    """The process edge: load config, set up logs and traces, serve; one line on a fatal error."""
    try:
        config = load_config(config_cls, service, sys.argv[1:] if argv is None else argv)
    except ConfigError as exc:
        print(f"tamto-{service}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    run(service, config, lambda: serve(service, config, setup))


def run(
    service: str, config: ServiceConfig, serving: Callable[[], Coroutine[Any, Any, None]]
) -> None:
    """`main` once the config is loaded: logs, traces, then `serving()` until it ends
    (a process running several services serves them all in one)."""
    configure_logging(service, config.member_id, config.log_level)
    keep_freed_memory()
    try:
        provider = setup_tracing(service, config.trace_settings)
    except ConfigError as exc:
        print(f"tamto-{service}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        asyncio.run(serving())
    except ConfigError as exc:
        print(f"tamto-{service}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except CredentialRefused as exc:
        print(f"tamto-{service}: refused: {exc}", file=sys.stderr)
        raise SystemExit(REFUSED_EXIT_CODE) from None
    except TamtoError as exc:
        print(f"tamto-{service}: cannot start: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        if provider is not None:
            provider.shutdown()
