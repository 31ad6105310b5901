"""Gateway wiring: member directory, stream registry, token verification, policy, the servicer,
the HTTP/JSON API and the MQTT broker, each on its own port (`tamto_gateway.http`,
`tamto_gateway.mqtt`)."""

from __future__ import annotations

import asyncio
import contextlib

import structlog
from tamto_functions.specs import SpecStore

from tamto_common.audit import AuditLog
from tamto_common.channels import ChannelPool
from tamto_common.guard import Guard, PolicyCache
from tamto_common.loop_lag import LoopLagMonitor, collect_fully_less_often
from tamto_common.membership import MemberDirectory
from tamto_common.oidc import external_verifiers
from tamto_common.placement import PlacementView
from tamto_common.service import Runtime
from tamto_common.tokens import Authenticator, TokenVerifier, refetch_jwks
from tamto_gateway.config import GatewayConfig
from tamto_gateway.ephemeral import EphemeralHub
from tamto_gateway.ephemeral_api import serve_ephemeral
from tamto_gateway.grpc_api import GatewayServicer, serve
from tamto_gateway.http.app import http_server
from tamto_gateway.mqtt.broker import mqtt_broker
from tamto_gateway.requests import RequestBroker
from tamto_gateway.routing import Routes
from tamto_gateway.security_api import AuthForwarder
from tamto_gateway.streams import StreamRegistry
from tamto_gateway.upstream import Upstream

log = structlog.get_logger(__name__)


async def setup(config: GatewayConfig, runtime: Runtime) -> None:
    external = external_verifiers(config.oidc_issuers_file)
    # Measures how long any step holds the loop (gauge tamto_event_loop_lag_max_seconds).
    await runtime.resources.enter_async_context(LoopLagMonitor())
    # Full garbage collections while a crowd of consumers attaches took up to 3.1 s
    # and held every thread (the lease keep-alive's too).
    collect_fully_less_often()
    directory = await runtime.resources.enter_async_context(MemberDirectory(runtime.etcd))
    channels = ChannelPool()
    runtime.resources.push_async_callback(channels.close)
    # Moved partitions and drained routers (tamto_common.placement), as routers see them.
    placement = await runtime.resources.enter_async_context(PlacementView(runtime.etcd))
    routes = Routes(directory, runtime.etcd, placement)
    upstream = Upstream(routes, channels, config.upstream_timeout_s, config.consume_setups)
    runtime.resources.push_async_callback(upstream.close)
    await runtime.resources.enter_async_context(upstream.follower)
    internal = TokenVerifier(upstream.jwks, config.token_issuer, config.token_audience)
    audit = AuditLog("gateway", config.audit_path, runtime.bus)
    runtime.resources.push_async_callback(audit.close)
    cache = PolicyCache(runtime.etcd, runtime.bus, config.policy_refresh_s)
    new_signing_key = cache.signing_key_events()
    await cache.start()
    runtime.resources.push_async_callback(cache.stop)
    refresher = asyncio.create_task(refetch_jwks(internal, new_signing_key), name="jwks-refetch")

    async def stop_refresher() -> None:
        refresher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await refresher

    runtime.resources.push_async_callback(stop_refresher)
    streams = StreamRegistry(
        runtime.etcd,
        config.max_partitions,
        runtime.bus,
        storage_nodes=lambda: len(directory.members("storage")),
    )
    subscription = await streams.watch_events()
    if subscription is not None:
        runtime.resources.push_async_callback(subscription.unsubscribe)
    ephemeral = EphemeralHub(runtime.bus)
    await ephemeral.start()
    runtime.resources.push_async_callback(ephemeral.close)
    requests = RequestBroker(runtime.bus, runtime.etcd, ephemeral)
    runtime.resources.push_async_callback(requests.close)
    guard = Guard(Authenticator(internal, external), cache, audit)
    servicer = GatewayServicer(
        streams,
        upstream,
        guard,
        AuthForwarder(routes, channels, config.upstream_timeout_s),
        config.max_message_bytes,
        ephemeral,
        requests,
        config.consume_setup_slots,
    )
    servicer.consumers_per_connection.limit = config.max_consumers_per_connection
    servicer.placement_etcd = runtime.etcd
    servicer.function_specs = SpecStore(runtime.etcd)
    serve(servicer, runtime.server)
    serve_ephemeral(servicer, runtime.server)
    if config.http_port:
        http, consumers = http_server(config, servicer, streams, guard)
        await http.start()
        # Closed first: an SSE or WebSocket consumer's response then ends, and the
        # server stops without waiting for it.
        runtime.resources.push_async_callback(http.stop)
        runtime.resources.push_async_callback(consumers.close_all)
        log.info("http api serving", port=http.port, tls=config.tls() is not None)
    if config.mqtt_port:
        broker = mqtt_broker(config, servicer, streams, guard, upstream, runtime)
        await broker.start()
        runtime.resources.push_async_callback(broker.stop)
        log.info("mqtt broker serving", port=broker.port, tls=config.tls() is not None)
