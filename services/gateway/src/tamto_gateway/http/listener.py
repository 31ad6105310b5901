"""The HTTP API's listener: uvicorn in the gateway's own event loop, on its own port.

Inside the gateway's loop, the routes call the gateway's gRPC handlers directly (no
hop, one policy cache, one set of router sessions), at the price of sharing its CPU.

With TLS, every accepted connection's first byte is looked at before anything else:
a TLS handshake goes on to TLS; anything else (a plaintext HTTP request on the TLS
port) is answered at once with a plaintext 400 problem saying to use https, and
closed, instead of the handshake failing silently or the client waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
from collections.abc import Callable, Coroutine
from typing import Any

import structlog
import uvicorn
from starlette.types import ASGIApp

from tamto_common.errors import ConfigError
from tamto_gateway.config import GatewayConfig
from tamto_gateway.http.problems import PROBLEM_JSON

log = structlog.get_logger(__name__)

#: The first byte of a TLS record carrying a handshake (a ClientHello).
TLS_HANDSHAKE = 0x16
#: Longest an accepted connection may stay silent before its first byte.
FIRST_BYTE_S = 10.0
#: Pause after a failed accept (no file descriptor left) before the next.
ACCEPT_BACKOFF_S = 0.1


async def accept_forever(
    sock: socket.socket,
    serve: Callable[[socket.socket, Any], Coroutine[Any, Any, None]],
    tasks: set[asyncio.Task[None]],
    protocol: str,
) -> None:
    """Accept connections on `sock` until cancelled, each served (`serve(conn,
    address)`) in a task of its own kept in `tasks` while it runs. A failed accept
    (out of file descriptors, say) is logged and retried after a pause: the port
    stays open."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            conn, address = await loop.sock_accept(sock)
        except OSError as exc:
            log.warning(f"{protocol} accept failed", error=str(exc))
            await asyncio.sleep(ACCEPT_BACKOFF_S)
            continue
        task = asyncio.create_task(serve(conn, address))
        tasks.add(task)
        task.add_done_callback(tasks.discard)


def _plaintext_refusal() -> bytes:
    body = json.dumps(
        {
            "type": "about:blank",
            "title": "Bad Request",
            "status": 400,
            "detail": "this port speaks TLS: use https://",
            "code": "PLAINTEXT_ON_TLS_PORT",
        }
    ).encode()
    head = (
        "HTTP/1.1 400 Bad Request\r\n"
        f"Content-Type: {PROBLEM_JSON}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (ConfigError naming --http-port if taken)."""
    try:
        sock = socket.create_server((host, port), reuse_port=False)
    except OSError as exc:
        raise ConfigError(
            "--http-port", f"cannot listen on {host}:{port}: {exc.strerror}"
        ) from None
    sock.setblocking(False)
    return sock


class _Acceptor:
    """Accepts connections and hands each to uvicorn's protocol, sniffing for TLS."""

    def __init__(self, sock: socket.socket, protocol: Any, tls: ssl.SSLContext | None) -> None:
        self._sock = sock
        self._protocol = protocol
        self._tls = tls
        self._pending: set[asyncio.Task[None]] = set()
        self._task = asyncio.create_task(
            accept_forever(sock, lambda conn, _: self._hand_over(conn), self._pending, "http"),
            name="http-accept",
        )

    async def _hand_over(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        conn.setblocking(False)
        try:
            if self._tls is not None and not await _starts_tls(conn):
                with contextlib.suppress(OSError):
                    await loop.sock_sendall(conn, _plaintext_refusal())
                conn.close()
                return
            await loop.connect_accepted_socket(self._protocol, conn, ssl=self._tls)
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            log.debug("http connection dropped before its first request", error=str(exc))
            conn.close()

    def close(self) -> None:
        self._task.cancel()
        for task in self._pending:
            task.cancel()
        self._sock.close()

    async def wait_closed(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def _starts_tls(conn: socket.socket) -> bool:
    """Whether the connection's first byte opens a TLS handshake (it is left unread)."""
    return await first_byte(conn) == TLS_HANDSHAKE


async def first_byte(conn: socket.socket) -> int | None:
    """The connection's first byte, left unread (None: it closed before sending one);
    TimeoutError after `FIRST_BYTE_S` of silence. The MQTT broker sniffs with it too."""
    loop = asyncio.get_running_loop()
    readable: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(conn.fileno(), ready)
    try:
        async with asyncio.timeout(FIRST_BYTE_S):
            await readable
    finally:
        loop.remove_reader(conn.fileno())
    first = conn.recv(1, socket.MSG_PEEK)
    return first[0] if first else None


class EdgeServer(uvicorn.Server):
    """uvicorn's server on a socket of ours (`listen`) with the TLS sniffing above."""

    def __init__(self, app: ASGIApp, sock: socket.socket, tls: ssl.SSLContext | None) -> None:
        config = uvicorn.Config(
            app,
            lifespan="off",
            log_config=None,
            access_log=False,
            ws="websockets-sansio",
            server_header=False,
            timeout_graceful_shutdown=5,
        )
        super().__init__(config)
        self._sock = sock
        self._tls = tls
        self._runner: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await self.lifespan.startup()
        config = self.config

        def protocol() -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state, app_state=self.lifespan.state
            )

        self.servers = [_Acceptor(self._sock, protocol, self._tls)]  # type: ignore[list-item]
        self.started = True

    async def start(self) -> None:
        """Serve in the background until `stop`."""
        if not self.config.loaded:
            self.config.load()
        self.lifespan = self.config.lifespan_class(self.config)
        await self.startup()
        self._runner = asyncio.create_task(self._run(), name="http-server")

    async def _run(self) -> None:
        await self.main_loop()
        await self.shutdown()

    async def stop(self) -> None:
        self.should_exit = True
        if self._runner is not None:
            await self._runner


def tls_context(
    cert: str, key: str, ca: str, require_client_cert: bool, alpn: str = "http/1.1"
) -> ssl.SSLContext:
    """An edge port's TLS (HTTP's, MQTT's with `alpn="mqtt"`): the gateway's
    certificate, its CA for client certificates."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=ca)
    context.load_cert_chain(cert, key)
    context.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    context.set_alpn_protocols([alpn])
    return context


def edge_tls(config: GatewayConfig, alpn: str = "http/1.1") -> ssl.SSLContext | None:
    """The edge port's TLS (`tls_context`) as the gateway's flags say; None without TLS."""
    if config.tls() is None:
        return None
    return tls_context(
        config.tls_cert_file,
        config.tls_key_file,
        config.tls_ca_file,
        require_client_cert=config.tls_client_auth == "require",
        alpn=alpn,
    )
