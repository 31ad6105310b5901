"""One MQTT client connection, from CONNECT to its end.

CONNECT first (within `CONNECT_WAIT_S`), else the connection is closed. Its
password is the credential: an API key, or a token (`tamto auth token`); the user
name is not checked. No password: CONNACK 5 (not authorized); a refused one:
CONNACK 4 (bad user name or password), audited as any refused call. A persistent
session belongs to the identity that made it: another identity reusing its
client id gets CONNACK 5.

Then packets until DISCONNECT, a protocol violation (closed without an answer:
MQTT-4.8.0-1), a refused publish, a keep-alive missed by half its period again
(MQTT-3.1.2-24), or the same client id connecting elsewhere (taken over:
MQTT-3.1.4-2). Any end but DISCONNECT publishes the will.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Callable

import structlog

from tamto_common.errors import InvalidArgument, TamtoError, Unauthenticated
from tamto_gateway.mqtt import codec
from tamto_gateway.mqtt.context import Identity, Shared
from tamto_gateway.mqtt.inbound import Inbound
from tamto_gateway.mqtt.outbound import Outbound
from tamto_gateway.mqtt.state import StoredSession
from tamto_gateway.mqtt.subscriptions import Subscriptions, discard_session

log = structlog.get_logger(__name__)

#: Longest a new connection may take to send its CONNECT.
CONNECT_WAIT_S = 10.0
#: Longest the publishes a leaving client sent may take to be stored.
FLUSH_WAIT_S = 10.0
#: Longest a client id may be, in characters.
MAX_CLIENT_ID = 256

Claim = Callable[["Connection"], Awaitable[None]]


class Ended(Exception):
    """The connection ends: `reason` is logged."""


class Connection:
    """One client (module docstring)."""

    def __init__(
        self,
        shared: Shared,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        peer: str,
    ) -> None:
        self._shared = shared
        self._reader = reader
        self._writer = writer
        self.peer = peer
        self.client_id = ""
        #: Tells this connection apart from another of the same client id.
        self.nonce = secrets.token_hex(8)
        self._outbound = Outbound(writer, shared.limits)
        self._failure: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()

    def end(self, reason: BaseException) -> None:
        """End the connection from outside (taken over, a source failed, shutdown)."""
        if not self._failure.done():
            self._failure.set_result(reason)

    async def serve(self, claim: Claim) -> None:
        """Serve the client until the connection ends."""
        try:
            async with asyncio.timeout(CONNECT_WAIT_S):
                first = await codec.read_packet(self._reader, self._shared.limits.max_packet_bytes)
            if not isinstance(first, codec.Connect):
                raise codec.MalformedPacket("the first packet is not CONNECT")
            await self._session(first, claim)
        except codec.ConnectRefused as exc:
            log.info("mqtt connect refused", peer=self.peer, code=exc.code, reason=str(exc))
            self._outbound.send(codec.connack(False, exc.code))
        except (codec.MalformedPacket, TimeoutError, Ended) as exc:
            log.info(
                "mqtt connection closed", peer=self.peer, client=self.client_id, reason=str(exc)
            )
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except Exception:  # this connection's failure alone: the broker serves on
            log.exception("mqtt connection failed", peer=self.peer, client=self.client_id)
        finally:
            with contextlib.suppress(Exception):
                await self._writer.drain()
            self._writer.close()

    async def _session(self, connect: codec.Connect, claim: Claim) -> None:
        identity, stored = await self._accept(connect)
        await claim(self)
        clean = connect.clean_session
        if clean and stored is not None:
            await discard_session(self._shared, self.client_id, stored)
            stored = None
        present = stored is not None
        if not clean and stored is None:
            stored = StoredSession(identity.subject)
            await self._shared.state.save_session(self.client_id, stored)
        self._outbound.send(codec.connack(present, codec.ACCEPTED))
        subscriptions = Subscriptions(
            self._shared, identity, self._outbound, self.client_id, stored, self.end
        )
        inbound = Inbound(
            self._shared,
            identity,
            self._outbound.send,
            lambda: self._persist_qos2(stored, inbound),
            stored.received if stored is not None else {},
        )
        if stored is not None:
            self._outbound.persist = lambda: self._persist_qos2(stored, inbound)
            self._outbound.resume(stored.releasing)
        clean_end = False
        try:
            await subscriptions.restore()
            clean_end = await self._run(connect.keep_alive_s, inbound, subscriptions)
        finally:
            await subscriptions.close()
            if connect.will is not None and not clean_end:
                await self._publish_will(inbound, connect.will)

    async def _persist_qos2(self, stored: StoredSession | None, inbound: Inbound) -> None:
        """Save a persistent session's QoS 2 packet ids (nothing for a clean session)."""
        if stored is None:
            return
        stored.received = dict(inbound.received)
        stored.releasing = sorted(self._outbound.releasing)
        await self._shared.state.save_session(self.client_id, stored)

    async def _accept(self, connect: codec.Connect) -> tuple[Identity, StoredSession | None]:
        """Check the CONNECT's credential and client id (`ConnectRefused`)."""
        self.client_id = connect.client_id or (
            f"auto-{secrets.token_hex(12)}" if connect.clean_session else ""
        )
        if not self.client_id or len(self.client_id) > MAX_CLIENT_ID:
            raise codec.ConnectRefused(
                codec.IDENTIFIER_REJECTED,
                f"an empty client id needs clean session 1; at most {MAX_CLIENT_ID} characters",
            )
        if connect.password is None:
            raise codec.ConnectRefused(codec.NOT_AUTHORIZED, "no password (API key or token)")
        identity = Identity(self._shared, connect.password.decode(errors="replace"), self.peer)
        try:
            await identity.authenticate()
        except (Unauthenticated, InvalidArgument) as exc:
            raise codec.ConnectRefused(codec.BAD_CREDENTIALS, str(exc)) from None
        except TamtoError as exc:
            raise codec.ConnectRefused(codec.SERVER_UNAVAILABLE, str(exc)) from None
        try:
            await self._shared.single_stream.ready()
        except TamtoError as exc:
            raise codec.ConnectRefused(codec.SERVER_UNAVAILABLE, str(exc)) from None
        stored = await self._shared.state.session(self.client_id)
        if stored is not None and stored.subject != identity.subject:
            raise codec.ConnectRefused(
                codec.NOT_AUTHORIZED, f"client id {self.client_id!r} is another identity's"
            )
        return identity, stored

    async def _run(self, keep_alive_s: int, inbound: Inbound, subs: Subscriptions) -> bool:
        """Packets until the end; True for a DISCONNECT."""
        reading = asyncio.create_task(self._read(keep_alive_s, inbound, subs), name="mqtt-read")
        publishing = asyncio.create_task(inbound.run(), name="mqtt-publish")
        tasks: set[asyncio.Future[object]] = {reading, publishing, self._failure}  # type: ignore[arg-type]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if reading in done and publishing not in done:
                # The client is gone or said DISCONNECT: what it sent is still stored.
                await self._flush(inbound, publishing)
        finally:
            reading.cancel()
            publishing.cancel()
            await asyncio.gather(reading, publishing, return_exceptions=True)
        if reading in done and not reading.cancelled() and reading.exception() is None:
            return True
        for task in done:
            error = task.exception() if task is not self._failure else task.result()
            if isinstance(error, TamtoError):
                log.info(
                    "mqtt connection ended",
                    peer=self.peer,
                    client=self.client_id,
                    reason=str(error),
                )
                return False
            if isinstance(error, BaseException):
                raise error
        return False

    async def _flush(self, inbound: Inbound, publishing: asyncio.Task[None]) -> None:
        """Wait (up to `FLUSH_WAIT_S`) until the publishes received are stored."""
        flushed = asyncio.create_task(inbound.flushed())
        await asyncio.wait(
            {flushed, publishing}, timeout=FLUSH_WAIT_S, return_when="FIRST_COMPLETED"
        )
        flushed.cancel()

    async def _read(self, keep_alive_s: int, inbound: Inbound, subs: Subscriptions) -> None:
        """Read and handle packets; returns at DISCONNECT."""
        wait = keep_alive_s * 1.5 if keep_alive_s else None
        while True:
            try:
                async with asyncio.timeout(wait):
                    packet = await codec.read_packet(
                        self._reader, self._shared.limits.max_packet_bytes
                    )
            except TimeoutError:
                raise Ended(f"no packet for {wait} s (keep-alive {keep_alive_s} s)") from None
            if isinstance(packet, codec.Publish):
                await inbound.put(packet)
            elif isinstance(packet, codec.Ack):
                await self._ack(packet, inbound)
            elif isinstance(packet, codec.Subscribe):
                codes = await subs.subscribe(packet.filters)
                self._outbound.send(codec.suback(packet.packet_id, codes))
            elif isinstance(packet, codec.Unsubscribe):
                await subs.unsubscribe(packet.filters)
                self._outbound.send(codec.ack(codec.UNSUBACK, packet.packet_id))
            elif isinstance(packet, codec.Bare) and packet.kind == codec.PINGREQ:
                self._outbound.send(codec.PINGRESP_BYTES)
            elif isinstance(packet, codec.Bare):
                return
            else:
                raise codec.MalformedPacket("a second CONNECT")

    async def _ack(self, packet: codec.Ack, inbound: Inbound) -> None:
        if packet.kind == codec.PUBACK:
            self._outbound.acked(packet.packet_id)
        elif packet.kind == codec.PUBREL:
            await inbound.released(packet.packet_id)
        elif packet.kind == codec.PUBREC:
            await self._outbound.received(packet.packet_id)
        else:
            await self._outbound.completed(packet.packet_id)

    async def _publish_will(self, inbound: Inbound, will: codec.Will) -> None:
        packet = codec.Publish(will.topic, will.payload, will.qos, will.retain)
        try:
            await inbound.publish_now(packet)
        except Exception as exc:
            log.info("mqtt will not published", client=self.client_id, error=str(exc))
