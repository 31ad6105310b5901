"""Gateway wiring: member directory, stream registry, token verifier, the servicer."""

from __future__ import annotations

from tamto_common.channels import ChannelPool
from tamto_common.membership import MemberDirectory
from tamto_common.service import Runtime
from tamto_gateway.config import GatewayConfig
from tamto_gateway.grpc_api import GatewayServicer
from tamto_gateway.routing import Routes
from tamto_gateway.streams import StreamRegistry
from tamto_gateway.tokens import TokenVerifier
from tamto_gateway.upstream import Upstream
from tamto_protocol.v1 import gateway_pb2_grpc


async def setup(config: GatewayConfig, runtime: Runtime) -> None:
    directory = await runtime.resources.enter_async_context(MemberDirectory(runtime.etcd))
    channels = ChannelPool()
    runtime.resources.push_async_callback(channels.close)
    upstream = Upstream(Routes(directory), channels, config.upstream_timeout_s)
    verifier = TokenVerifier(upstream.jwks, config.token_issuer, config.token_audience)
    streams = StreamRegistry(runtime.etcd, config.max_partitions, runtime.bus)
    subscription = await streams.watch_events()
    if subscription is not None:
        runtime.resources.push_async_callback(subscription.unsubscribe)
    servicer = GatewayServicer(
        streams,
        upstream,
        verifier,
        config.max_message_bytes,
    )
    gateway_pb2_grpc.add_GatewayServicer_to_server(servicer, runtime.server)
