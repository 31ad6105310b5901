"""What every MQTT connection of a gateway shares: the gateway's own servicer and
registries, the cluster state, the topic rule and the limits; and the per-connection
credentials that turn into gateway calls."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tamto_common.errors import FailedPrecondition
from tamto_common.streams import StreamDef
from tamto_gateway.http.auth import Credentials, HttpCall

if TYPE_CHECKING:
    from tamto_common.guard import Guard
    from tamto_common.tokens import Principal
    from tamto_gateway.grpc_api import GatewayServicer
    from tamto_gateway.mqtt.state import MqttState
    from tamto_gateway.mqtt.topics import TopicRule
    from tamto_gateway.streams import StreamRegistry
    from tamto_gateway.upstream import Upstream


@dataclass(frozen=True)
class Limits:
    #: QoS 1 messages a connection may have unacknowledged each way.
    max_inflight: int
    #: Largest packet accepted from a client, in bytes.
    max_packet_bytes: int
    #: Bytes queued for a client past which delivery to it waits (its alone).
    write_buffer_bytes: int


#: Partitions of the single stream when the gateway creates it (ordered per topic: by key).
SINGLE_STREAM_PARTITIONS = 4


class SingleStream:
    """The stream of `--mqtt-stream`, created with the gateway's own rights (as the
    admin API's EnsureStream does, without a caller's permission) when the first
    client connects: not at start, when the storage nodes a new stream's replication
    is chosen from may not have joined yet. Nothing to do without one."""

    def __init__(self, streams: StreamRegistry, name: str) -> None:
        self._streams = streams
        self.name = name
        self._ready = not name
        self._lock = asyncio.Lock()

    async def ready(self) -> None:
        """Create the stream if missing (a `TamtoError` if that fails)."""
        if self._ready:
            return
        async with self._lock:
            if self._ready:
                return
            wanted = StreamDef(
                name=self.name,
                partitions=SINGLE_STREAM_PARTITIONS,
                replication_factor=0,  # 0: chosen for the cluster, as EnsureStream does
                ack_quorum=0,
            )
            ensured = await self._streams.ensure(wanted, overwrite=False)
            if ensured.stream.ephemeral:
                raise FailedPrecondition(
                    f"--mqtt-stream {self.name!r} is an ephemeral stream: it must be persistent"
                )
            self._ready = True


@dataclass(frozen=True)
class Shared:
    servicer: GatewayServicer
    streams: StreamRegistry
    guard: Guard
    upstream: Upstream
    state: MqttState
    rule: TopicRule
    credentials: Credentials
    limits: Limits
    single_stream: SingleStream


def looks_like_token(secret: str) -> bool:
    """Whether a CONNECT password is a token (a JWT: three base64url parts) rather
    than an API key."""
    parts = secret.split(".")
    return len(parts) == 3 and secret.startswith("ey")


class Identity:
    """Who a connection speaks for: its credential, made into a gateway call each time
    one is needed (an API key's token is renewed before it expires)."""

    def __init__(self, shared: Shared, secret: str, peer: str) -> None:
        self._shared = shared
        self._secret = secret
        self.peer = peer
        self.principal: Principal | None = None

    def _headers(self) -> dict[str, str]:
        if looks_like_token(self._secret):
            return {"authorization": f"Bearer {self._secret}"}
        return {"x-api-key": self._secret}

    async def call(self) -> HttpCall:
        return await self._shared.credentials.call(self._headers(), self.peer)

    async def authenticate(self) -> Principal:
        """Check the credential (`Unauthenticated`, audited, if it is no good)."""
        try:
            call = await self.call()
            self.principal = await self._shared.guard.principal(
                call.invocation_metadata(), self.peer, "MqttConnect"
            )
        except Exception:
            self._shared.credentials.forget(self._headers())
            raise
        return self.principal

    @property
    def subject(self) -> str:
        assert self.principal is not None
        return self.principal.subject
