"""Consume sessions multiplexed on one stream per router (`Router.ConsumeMux`).

With one router stream per consume session, 10,000 consumers attaching
to a subscription made the gateway set up 10,000 gRPC calls, and leaving made it
cancel them, about 0.3 ms each of gRPC core's work on the event loop; publishes
waited seconds behind that. Here a gateway carries all its sessions to a router
on one long-lived stream (as Pulsar carries many consumers on one connection by
consumer id): opening a session is its subscribe message, leaving one small
`cancel` message, and no gRPC call is set up or cancelled.

`MuxSession` is one session: `write`, `done_writing` (the `end` of the session:
the router applies what it got and ends it cleanly) and `cancel` (abandon: the
router detaches it at once and redelivers what it left unacked), as on a router
consume call; its user `listen`s for the router's encoded `ConsumeResponse`s and
for its end (cleanly, or the router's status as a `TamtoError` naming the
router): the mux's reader hands them over as they come, so a session costs no
task and the reader never waits on one. No bound is needed: the router delivers
a session only the credit its client granted.

Each mux runs on a gRPC connection of its own (`Mux.open`), apart from the one
the gateway's appends to that router take.

When the mux stream fails, every session on it ends UNAVAILABLE naming the
router (the SDK reconnects, and the routers redeliver what was unacked); the next
session opens a new mux. A router without `ConsumeMux` (one from before it,
during a rolling upgrade) answers UNIMPLEMENTED: `Muxes.get` then answers None
and the gateway opens a `Consume` stream per session, as before, trying the mux
again `STREAM_RETRY_S` later.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Protocol

import grpc
import structlog
from prometheus_client import Gauge

from tamto_common.channels import peer_channel
from tamto_common.errors import TamtoError, Unavailable
from tamto_common.grpc_errors import error_for
from tamto_protocol.delivery_wire import MuxResponse, WireError, parse_mux_responses
from tamto_protocol.pipelined import STREAM_RETRY_S
from tamto_protocol.v1 import messages_pb2, router_pb2

ROUTER_CONSUME_MUX = "/tamto.v1.Router/ConsumeMux"

#: Requests waiting to be written to the mux above which a session's `write`
#: waits for the queue to drain (the router reads them without waiting).
_SEND_HIGH = 4096

MUX_SESSIONS = Gauge(
    "tamto_gateway_consume_mux_sessions",
    "Consume sessions on the gateway's one consume stream to each router",
    ["router"],
)

#: How long sessions opening with a router whose mux just failed to open fail with
#: that error instead of each trying (and, with a router that does not answer,
#: each waiting the upstream timeout in turn).
_OPEN_FAILED_S = 1.0

#: Most requests written in one message.
_BATCH = 1024

log = structlog.get_logger(__name__)


class MuxSession:
    """One consume session on a `Mux` (module docstring)."""

    def __init__(self, mux: Mux, session_id: int) -> None:
        self._mux = mux
        self.id = session_id
        self._writing = True
        self._ended = False
        self._end: TamtoError | None = None
        self._listener: SessionListener | None = None

    def listen(self, listener: SessionListener) -> None:
        """Hand the session's responses and its end to `listener` as the mux reads
        them. Before its first write: nothing comes before the subscribe, but the
        end may (a session of a failed mux), and is handed over at once."""
        if self._ended:
            listener.on_end(self._end)
        else:
            self._listener = listener

    async def write(self, request: messages_pb2.ConsumeRequest) -> None:
        """Send the session's next request; raises `asyncio.InvalidStateError` once it
        ended or half-closed (as a call's write does)."""
        if not self._writing:
            raise asyncio.InvalidStateError(f"consume session {self.id} is not writing")
        await self._mux.send(router_pb2.ConsumeMuxRequest(session=self.id, consume=request))

    async def done_writing(self) -> None:
        """Half-close: the router applies what it got, then ends the session cleanly."""
        if self._writing and not self._ended:
            self._writing = False
            await self._mux.send(router_pb2.ConsumeMuxRequest(session=self.id, end=True))

    def cancel(self) -> bool:
        """Abandon the session (the router redelivers what it left unacked)."""
        if self._ended:
            return False
        self._mux.abandon(self)
        self.end(Unavailable(f"consume session {self.id} cancelled"))
        return True

    # -- called by the mux --

    def deliver(self, response: bytes) -> None:
        if not self._ended and self._listener is not None:
            self._listener.on_response(response)

    def end(self, error: TamtoError | None) -> None:
        """The session ended (None: cleanly); nothing more is sent or received."""
        if self._ended:
            return
        self._ended = True
        self._writing = False
        self._end = error
        if self._listener is not None:
            # Let go of it: its user (holding this session) is then freed as soon
            # as nothing else holds it, not at the next full collection.
            listener, self._listener = self._listener, None
            listener.on_end(error)


class SessionListener(Protocol):
    """What a listening `MuxSession` hands its responses and its end to; called by
    the mux's reader, so neither may wait."""

    def on_response(self, response: bytes) -> None:
        """An encoded `ConsumeResponse` of the router."""

    def on_end(self, error: TamtoError | None) -> None:
        """The session ended: cleanly (None) or with the router's status."""


class Mux:
    """The consume sessions of this gateway on one `ConsumeMux` stream to one router."""

    def __init__(
        self, channel: grpc.aio.Channel, call: grpc.aio.StreamStreamCall, address: str
    ) -> None:
        self.address = address
        self._channel = channel
        self._call = call
        self._channel_closed: asyncio.Future[None] | None = None  # once it failed
        self._sessions: dict[int, MuxSession] = {}
        self._last_id = 0
        self._send: asyncio.Queue[router_pb2.ConsumeMuxRequest] = asyncio.Queue()
        self._room = asyncio.Event()
        self._gauge = MUX_SESSIONS.labels(address)
        #: Why the stream failed (every session then ended with it); None while it serves.
        self.failure: TamtoError | None = None
        self._writer = asyncio.create_task(self._write_all())
        self._reader = asyncio.create_task(self._read_all())

    @classmethod
    async def open(cls, address: str, timeout_s: float) -> Mux | None:
        """Open the stream, on a connection of its own, and wait for the router's
        initial metadata; None if the router has no `ConsumeMux` (UNIMPLEMENTED).
        Raises `TamtoError` if it fails.

        Its own connection, not the one the gateway's appends to that router take:
        the crowd's subscribes, acks and deliveries then never share a connection's
        flow-control window and transport work with publishes. With 10,000
        consumers coming and going, publishes kept under 1 s in 5 of 6 runs with
        this and `MuxSession.listen`, in 2 of 6 with `listen` alone (the crowd test,
        `tests/e2e/test_crowd.py`)."""
        channel = peer_channel(address, own_connection=True)
        mux = None
        try:
            mux = await cls._open_on(channel, address, timeout_s)
            return mux
        finally:
            if mux is None:
                await channel.close()

    @classmethod
    async def _open_on(
        cls, channel: grpc.aio.Channel, address: str, timeout_s: float
    ) -> Mux | None:
        call = channel.stream_stream(
            ROUTER_CONSUME_MUX,
            request_serializer=router_pb2.ConsumeMuxRequests.SerializeToString,
            response_deserializer=None,
        )()
        try:
            async with asyncio.timeout(timeout_s):
                await call.initial_metadata()
                if call.done():
                    code = await call.code()
                    if code is grpc.StatusCode.UNIMPLEMENTED:
                        return None
                    raise error_for(code, f"a router's consume mux: {await call.details()}")
        except TimeoutError:
            call.cancel()
            log.warning("consume mux not answered", router=address, timeout_s=timeout_s)
            raise Unavailable(f"a router's consume mux not answered in {timeout_s:g} s") from None
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.UNIMPLEMENTED:
                return None
            log.warning("consume mux failed to open", router=address, error=exc.details())
            raise Unavailable(f"a router's consume mux: {exc.details()}") from exc
        return cls(channel, call, address)

    @property
    def sessions(self) -> int:
        return len(self._sessions)

    def session(self) -> MuxSession:
        """A new session (its first write is its subscribe)."""
        self._last_id += 1
        session = MuxSession(self, self._last_id)
        if self.failure is not None:
            session.end(self.failure)
        else:
            self._sessions[session.id] = session
            self._gauge.set(len(self._sessions))
        return session

    async def send(self, request: router_pb2.ConsumeMuxRequest) -> None:
        """Queue a request for the writer; waits while too many are queued."""
        if self.failure is not None:
            raise asyncio.InvalidStateError(str(self.failure))
        self._send.put_nowait(request)
        while self._send.qsize() > _SEND_HIGH and self.failure is None:
            self._room.clear()
            await self._room.wait()

    def abandon(self, session: MuxSession) -> None:
        if self._sessions.pop(session.id, None) is not None and self.failure is None:
            self._gauge.set(len(self._sessions))
            self._send.put_nowait(router_pb2.ConsumeMuxRequest(session=session.id, cancel=True))

    async def _write_all(self) -> None:
        """Write what is queued, as one message (what queued while the last was
        written goes in the next: a crowd's subscribes or cancels go together)."""
        try:
            while True:
                batch = [await self._send.get()]
                while not self._send.empty() and len(batch) < _BATCH:
                    batch.append(self._send.get_nowait())
                await self._call.write(router_pb2.ConsumeMuxRequests(requests=batch))
                if self._send.qsize() <= _SEND_HIGH // 2:
                    self._room.set()
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError) as exc:
            self._fail(f"a write failed: {exc}")  # the reader usually reports it first

    async def _read_all(self) -> None:
        try:
            async for data in self._call:
                for response in parse_mux_responses(data):
                    self._dispatch(response)
            self._fail("the router ended it")
        except grpc.aio.AioRpcError as exc:
            self._fail(f"{exc.code().name}: {exc.details()}")
        except WireError as exc:
            self._fail(f"a malformed response: {exc}")

    def _dispatch(self, response: MuxResponse) -> None:
        session = self._sessions.get(response.session)
        if session is None:
            return  # abandoned meanwhile
        if response.consume is not None:
            session.deliver(response.consume)
        elif response.end is not None:
            del self._sessions[response.session]
            self._gauge.set(len(self._sessions))
            code, message = response.end
            # The router's own words, as they are: its address is the gateway's business.
            session.end(None if code == 0 else error_for(code, message))

    def _fail(self, why: str) -> None:
        """The stream is gone: every session ends UNAVAILABLE (the log names the router)."""
        if self.failure is not None:
            return
        log.warning("consume mux failed", router=self.address, why=why)
        self.failure = Unavailable(f"the consume stream to a router failed ({why})")
        sessions = list(self._sessions.values())
        self._sessions.clear()
        self._gauge.set(0)
        for session in sessions:
            session.end(self.failure)
        self._room.set()
        self._call.cancel()
        self._channel_closed = asyncio.ensure_future(self._channel.close())
        current = asyncio.current_task()
        for task in (self._writer, self._reader):
            if task is not current:
                task.cancel()

    async def close(self, why: str = "the gateway is stopping") -> None:
        """End the stream (the router abandons what sessions are left) and its tasks."""
        self._fail(why)
        for task in (self._writer, self._reader):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._channel_closed is not None:
            await self._channel_closed


class Muxes:
    """One `Mux` per router address: opened on the first session, opened again
    after it failed (or the gateway's channel to that router, given to `get`, was
    replaced: the mux itself runs on a connection of its own, see `Mux.open`);
    None for a router without `ConsumeMux`, until `STREAM_RETRY_S` later."""

    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._timeout = timeout_s
        self._clock = clock
        self._open: dict[str, tuple[grpc.aio.Channel, Mux]] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        self._without: dict[str, float] = {}  # address: when to try ConsumeMux again
        self._failed: dict[str, tuple[float, TamtoError]] = {}  # address: (until, why)

    def _usable(self, address: str, channel: grpc.aio.Channel) -> Mux | None:
        known = self._open.get(address)
        if known is not None and known[0] is channel and known[1].failure is None:
            return known[1]
        return None

    async def get(self, address: str, channel: grpc.aio.Channel) -> Mux | None:
        mux = self._usable(address, channel)
        if mux is not None:
            return mux
        if self._without.get(address, float("-inf")) > self._clock():
            return None
        async with self._opening.setdefault(address, asyncio.Lock()):
            mux = self._usable(address, channel)
            if mux is not None:
                return mux
            failed = self._failed.get(address)
            if failed is not None and failed[0] > self._clock():
                raise failed[1]  # sessions that waited behind a failed open fail with it
            try:
                mux = await Mux.open(address, self._timeout)
            except TamtoError as exc:
                self._failed[address] = (self._clock() + _OPEN_FAILED_S, exc)
                raise
            if mux is None:
                self._without[address] = self._clock() + STREAM_RETRY_S
                return None
            stale = self._open.get(address)
            self._open[address] = (channel, mux)
        if stale is not None:
            await stale[1].close()
        return mux

    async def close_all_but(self, addresses: set[str]) -> None:
        """Close the muxes to routers not at `addresses` (gone from the directory): their
        sessions end UNAVAILABLE, and a router coming back gets a new connection."""
        for address in [a for a in self._open if a not in addresses]:
            _channel, mux = self._open.pop(address)
            await mux.close("its router left the directory")

    def sessions(self) -> dict[str, int]:
        """Open sessions per router address."""
        return {address: mux.sessions for address, (_channel, mux) in self._open.items()}

    async def close(self) -> None:
        for _channel, mux in self._open.values():
            await mux.close()
        self._open.clear()
