"""The MQTT broker of a gateway: its listener on `--mqtt-port`, the connections by
client id, and take-over across the cluster.

It runs in the gateway's process and event loop, as the HTTP API does, and calls
the gateway's own handlers (`connection`, `inbound`, `sources`): the same
authentication, permissions, audit and checks as gRPC.

With TLS, each accepted connection's first byte is looked at first (as the HTTP
API's listener does): a TLS handshake goes on to TLS; an MQTT CONNECT in
plaintext is answered at once with CONNACK 3 (server unavailable) and closed,
and the gateway logs that the client must use TLS. On a plaintext port a TLS
ClientHello is answered at once with a TLS alert (handshake failure), so the
client's handshake fails at once instead of waiting.

A client id is one connection at a time in the whole cluster (MQTT-3.1.4-2): a
gateway accepting one closes its own older connection of that id and tells the
others on the bus (`tamto.mqtt.takeover`), which close theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

import structlog

from tamto_common.errors import ConfigError
from tamto_gateway.http.auth import Credentials
from tamto_gateway.http.listener import TLS_HANDSHAKE, accept_forever, edge_tls, first_byte
from tamto_gateway.mqtt import codec
from tamto_gateway.mqtt.connection import Connection, Ended
from tamto_gateway.mqtt.context import Limits, Shared, SingleStream
from tamto_gateway.mqtt.state import MqttState
from tamto_gateway.mqtt.topics import TopicRule

if TYPE_CHECKING:
    import nats.aio.client
    import nats.aio.msg

    from tamto_common.guard import Guard
    from tamto_common.service import Runtime
    from tamto_gateway.config import GatewayConfig
    from tamto_gateway.grpc_api import GatewayServicer
    from tamto_gateway.streams import StreamRegistry
    from tamto_gateway.upstream import Upstream

log = structlog.get_logger(__name__)

TAKEOVER_SUBJECT = "tamto.mqtt.takeover"
#: A fatal TLS alert record: handshake_failure.
TLS_ALERT = bytes([0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 0x28])


class Broker:
    """Accepts MQTT connections on a socket (module docstring)."""

    def __init__(
        self,
        shared: Shared,
        sock: socket.socket,
        tls: ssl.SSLContext | None,
        bus: nats.aio.client.Client,
    ) -> None:
        self._shared = shared
        self._sock = sock
        self._tls = tls
        self._bus = bus
        self._by_client: dict[str, Connection] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._accepting: asyncio.Task[None] | None = None
        self._takeovers: Any = None

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    async def start(self) -> None:
        self._takeovers = await self._bus.subscribe(TAKEOVER_SUBJECT, cb=self._on_takeover)
        self._accepting = asyncio.create_task(self._accept(), name="mqtt-accept")

    async def stop(self) -> None:
        """Stop accepting, end every connection (wills are published), wait for them."""
        if self._accepting is not None:
            self._accepting.cancel()
        self._sock.close()
        if self._takeovers is not None:
            with contextlib.suppress(Exception):
                await self._takeovers.unsubscribe()
        for connection in list(self._by_client.values()):
            connection.end(Ended("the gateway is stopping"))
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)
        for task in self._tasks:
            task.cancel()

    async def _accept(self) -> None:
        def serve(conn: socket.socket, address: Any) -> Coroutine[Any, Any, None]:
            return self._serve(conn, f"mqtt:{address[0]}:{address[1]}")

        await accept_forever(self._sock, serve, self._tasks, "mqtt")

    async def _serve(self, conn: socket.socket, peer: str) -> None:
        conn.setblocking(False)
        try:
            streams = await self._open(conn, peer)
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            log.debug("mqtt connection dropped before its first packet", error=str(exc))
            conn.close()
            return
        if streams is None:
            conn.close()
            return
        connection = Connection(self._shared, *streams, peer)
        try:
            await connection.serve(self._claim)
        finally:
            if self._by_client.get(connection.client_id) is connection:
                del self._by_client[connection.client_id]

    async def _open(
        self, conn: socket.socket, peer: str
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """The connection's streams, or None when it was refused for its protocol."""
        loop = asyncio.get_running_loop()
        first = await first_byte(conn)
        if first is None:
            return None
        tls_hello = first == TLS_HANDSHAKE
        if self._tls is not None and not tls_hello:
            log.warning("mqtt plaintext client on the TLS port: refused", peer=peer)
            with contextlib.suppress(OSError):
                await loop.sock_sendall(conn, codec.connack(False, codec.SERVER_UNAVAILABLE))
            return None
        if self._tls is None and tls_hello:
            log.warning("mqtt TLS client on the plaintext port: refused", peer=peer)
            with contextlib.suppress(OSError):
                await loop.sock_sendall(conn, TLS_ALERT)
            return None
        reader = asyncio.StreamReader(limit=2**16)
        protocol = asyncio.StreamReaderProtocol(reader)
        transport, _ = await loop.connect_accepted_socket(lambda: protocol, conn, ssl=self._tls)
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)

    async def _claim(self, connection: Connection) -> None:
        """Make `connection` its client id's only one, here and on every gateway."""
        older = self._by_client.get(connection.client_id)
        self._by_client[connection.client_id] = connection
        if older is not None and older is not connection:
            older.end(Ended("taken over by a new connection of its client id"))
        message = {"client_id": connection.client_id, "nonce": connection.nonce}
        await self._bus.publish(TAKEOVER_SUBJECT, json.dumps(message).encode())

    async def _on_takeover(self, msg: nats.aio.msg.Msg) -> None:
        try:
            claim = json.loads(msg.data)
            client_id, nonce = str(claim["client_id"]), str(claim["nonce"])
        except (ValueError, KeyError, TypeError):
            return
        connection = self._by_client.get(client_id)
        if connection is not None and connection.nonce != nonce:
            del self._by_client[client_id]
            connection.end(Ended("taken over by a connection of its client id elsewhere"))


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (ConfigError naming --mqtt-port if taken)."""
    try:
        sock = socket.create_server((host, port), reuse_port=False, backlog=1024)
    except OSError as exc:
        raise ConfigError(
            "--mqtt-port", f"cannot listen on {host}:{port}: {exc.strerror}"
        ) from None
    sock.setblocking(False)
    return sock


def mqtt_broker(
    config: GatewayConfig,
    servicer: GatewayServicer,
    streams: StreamRegistry,
    guard: Guard,
    upstream: Upstream,
    runtime: Runtime,
) -> Broker:
    """The MQTT broker of a gateway, bound to `--mqtt-port` (not started)."""
    shared = Shared(
        servicer=servicer,
        streams=streams,
        guard=guard,
        upstream=upstream,
        state=MqttState(runtime.etcd),
        rule=TopicRule(config.mqtt_stream_levels, config.mqtt_stream),
        credentials=Credentials(servicer),
        limits=Limits(
            max_inflight=config.mqtt_max_inflight,
            # A payload of the largest size, its topic and the packet's own bytes.
            max_packet_bytes=config.max_message_bytes + 64 * 1024,
            write_buffer_bytes=config.mqtt_write_buffer_bytes,
        ),
        single_stream=SingleStream(streams, config.mqtt_stream),
    )
    tls = edge_tls(config, alpn="mqtt")
    return Broker(shared, listen(config.host, config.mqtt_port), tls, runtime.bus)
