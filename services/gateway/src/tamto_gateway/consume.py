"""A client's consume session fanned out to the routers that own its partitions.

The gateway opens one session with each router, sends each the subscribe for
its partitions, grants each of them every credit the client grants, routes each
ack to the router owning that partition, and merges the routers' deliveries into
the client's stream. A router session is one of the sessions multiplexed on the
gateway's one stream to that router (`tamto_gateway.consume_mux`), or a
`Consume` stream of its own for a router without that. Both are written to as a
call; a mux session hands its responses over as the mux reads them
(`MuxSession.listen`), and a stream's are read by a task of its own (`_pump`).

Every router gets the whole grant, as each partition consumer of Pulsar gets a
whole receiver queue: a router stream's credit cannot be taken back, so a share
given to a router with nothing (more) to send would be stranded there. Split
shares strand the window: once an idle router holds half of it, the busy router
delivers less than the half the client waits for before granting again, and the
session stops for good (found as a read-back that stopped after a partition
moved to another router). The price is the bound: the client may hold up to
`credits` messages per router of its session, not per session.

If any router stream fails, the client's stream ends with that error, and the
SDK reconnects (the routers redeliver what was unacked). So does it when one of
its partitions is another router's now (`follow`, called by
`tamto_gateway.consume_follow`): a router cut off by the network ends nothing.

Ending with an error is a handshake on both hops (`messages.proto` StreamError):
a router announces its status in-band (on a stream of its own; a mux session's
end carries its status), the gateway stops writing to it and
half-closes, and only then does the router's status arrive; the gateway does the
same towards its client. A write racing with the end of a stream would otherwise
make gRPC report INTERNAL ("Internal error from Core") instead of the status.
A clean leave is the client's explicit `close`, forwarded to every router; the
end of the client's stream alone is not one (a killed consumer may look
half-closed).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
from prometheus_client import Gauge

from tamto_common.errors import InvalidArgument, TamtoError, Unavailable
from tamto_common.grpc_errors import downstream_error, error_for, in_band_status
from tamto_common.session_stop import WAKE, SessionStop
from tamto_common.subscribe import check_range_count
from tamto_gateway.consume_follow import OwnerNow
from tamto_gateway.consume_mux import MuxSession
from tamto_gateway.upstream import RouterConsume, Upstream
from tamto_protocol.delivery_wire import consume_error, parse_consume_error
from tamto_protocol.v1 import messages_pb2

#: Longest an erring consume stream waits for its client's half-close.
END_WAIT_S = 2.0

#: Longest a consume stream refused at setup waits for its client's half-close. Far
#: longer than `END_WAIT_S`: a client with thousands of streams in one event loop
#: writes a stream's first credit seconds after the refusal went out, and a write
#: after the stream ended turns its status into INTERNAL (docs/validation.md,
#: Refusals a client can read). Such a stream holds nothing but its handler.
REFUSED_END_WAIT_S = 60.0

#: Longest the gateway waits for a router stream to end once it said it is ending.
_ROUTER_END_S = 10.0

#: Write failures on a router stream: that stream is ending, and its pump reports why.
_WRITE_FAILED = (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError)


CONSUME_STEPS = Gauge(
    "tamto_gateway_consume_handlers",
    "Client consume streams in the gateway's Consume handler, by the step each is at",
    ["step"],
)


class SetupStep:
    """The step a Consume handler is at, counted in `CONSUME_STEPS`: a client stream
    that never attaches shows where the gateway waits for it, or, when the sum
    misses it, that its handler never started (the crowd, docs/testing.md)."""

    def __init__(self) -> None:
        self.now: Gauge | None = None

    def to(self, step: str) -> None:
        self.done()
        # Each consumer passes every step: the labelled gauges are looked up once.
        gauge = _STEP_GAUGES.get(step)
        if gauge is None:
            gauge = _STEP_GAUGES[step] = CONSUME_STEPS.labels(step)
        gauge.inc()
        self.now = gauge

    def done(self) -> None:
        if self.now is not None:
            self.now.dec()
            self.now = None


_STEP_GAUGES: dict[str, Gauge] = {}


class FanOut(SessionStop):
    def __init__(self, upstream: Upstream, subscribe: messages_pb2.Subscribe) -> None:
        self._upstream = upstream
        self._subscribe = subscribe
        self._calls: dict[str, RouterConsume] = {}
        self._owner_of: dict[int, str] = {}
        # Encoded `ConsumeResponse`s as the routers sent them, or the error that ends
        # it all. No bound of its own: a router sends only the credit the client granted.
        self._out: asyncio.Queue[bytes | BaseException] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []  # pumps of router `Consume` streams
        self._open_sessions = 0  # router sessions not ended yet (`_session_ended`)
        self._all_ended = asyncio.Event()
        self._finishing = False
        self._stopped: asyncio.Task[None] | None = None
        self._ending: set[str] = set()  # routers that announced the end of their stream
        #: The error a request of the client caused (the session then ends with it).
        self.failure: TamtoError | None = None
        self._moved = False  # `follow` found a partition on another router

    async def open(self, partitions: list[int]) -> None:
        """Open a stream to each router owning some of `partitions` and subscribe.

        Only a few sessions do this at once per router (`Upstream.consume_setups`):
        the others wait their turn, so a crowd attaching cannot starve publishes of
        the event loop.
        """
        # Followed from the first owner looked up: a change while it opens is seen.
        self._upstream.follower.add(self)
        by_router: dict[str, list[int]] = {}
        for p in partitions:
            address = await self._upstream.routes.router_for(self._subscribe.stream, p)
            by_router.setdefault(address, []).append(p)
            self._owner_of[p] = address
        for address, owned in by_router.items():
            async with self._upstream.consume_setups(address):
                call = await self._upstream.router_consume(address)
                self._calls[address] = call
                sub = messages_pb2.Subscribe()
                sub.CopyFrom(self._subscribe)
                del sub.partitions[:]
                sub.partitions.extend(owned)
                self._open_sessions += 1
                if isinstance(call, MuxSession):  # no task: the mux hands responses over
                    call.listen(_Listener(self, address))
                with contextlib.suppress(*_WRITE_FAILED):  # its listener or pump reports why
                    await call.write(messages_pb2.ConsumeRequest(subscribe=sub))
                if not isinstance(call, MuxSession):
                    self._tasks.append(asyncio.create_task(self._pump(address, call)))

    def follow(self, owner_now: OwnerNow) -> None:
        """End the client's stream UNAVAILABLE if one of its partitions is another
        router's now: the SDK subscribes again, through the new owner."""
        if self._moved or self._finishing:
            return
        stream = self._subscribe.stream
        for partition, address in self._owner_of.items():
            owner = owner_now(stream, partition)
            if owner is not None and owner != address:
                self._moved = True
                self._out.put_nowait(Unavailable(f"partition {stream}/{partition} moved"))
                return

    async def _pump(self, address: str, call: grpc.aio.StreamStreamCall) -> None:
        """A router `Consume` stream's responses, as a mux hands a session's over."""
        try:
            async for response in call:
                error = parse_consume_error(response)
                if error is not None:
                    self._session_ended(address, await self._router_ending(address, call, *error))
                    return
                self._deliver(response)
            self._session_ended(address, None)
        except grpc.aio.AioRpcError as exc:
            self._session_ended(address, downstream_error(exc, "the stream's router"))

    def _deliver(self, response: bytes) -> None:
        """A router's encoded response for the client."""
        if not self._finishing:  # after the client's half-close, nobody reads these
            self._out.put_nowait(response)

    def _session_ended(self, address: str, error: TamtoError | None) -> None:
        """A router session ended: cleanly or not, the client's stream ends with it."""
        self._out.put_nowait(error or Unavailable("a router ended the consume stream"))
        self._open_sessions -= 1
        if self._open_sessions == 0:
            self._all_ended.set()

    async def _router_ending(
        self, address: str, call: grpc.aio.StreamStreamCall, code: int, message: str
    ) -> TamtoError:
        """A router announced its status: stop writing to it, half-close, let it end."""
        self._ending.add(address)
        with contextlib.suppress(*_WRITE_FAILED):
            await call.done_writing()
        with contextlib.suppress(*_WRITE_FAILED, TimeoutError, TamtoError):
            async with asyncio.timeout(_ROUTER_END_S):
                async for _ in call:
                    pass
        return error_for(code, message)

    async def _write(self, address: str, request: messages_pb2.ConsumeRequest) -> None:
        """Write to a router's stream unless it is ending; a failed write means it is
        ending (its pump reports why), so the failure itself is not an error."""
        if address in self._ending:
            return
        with contextlib.suppress(*_WRITE_FAILED):
            await self._calls[address].write(request)

    async def forward(self, request: messages_pb2.ConsumeRequest) -> None:
        kind = request.WhichOneof("request")
        if kind == "credit":
            for router in self._calls:  # the whole grant to each (module docstring)
                await self._write(router, request)
        elif kind in ("ack", "nack", "term", "in_progress"):
            verb = getattr(request, kind)
            check_range_count(f"{kind}.ranges", len(verb.ranges))
            partition = verb.partition
            address = self._owner_of.get(partition)
            if address is None:
                raise InvalidArgument(
                    f"{kind} for partition {partition}, which this session does not read"
                )
            await self._write(address, request)
        elif kind == "close":
            for router in self._calls:
                await self._write(router, request)
        elif kind == "subscribe":
            raise InvalidArgument("subscribe may be sent only once per consume stream")
        else:
            raise InvalidArgument(
                "a consume request must set one of subscribe (first), credit, ack, nack, "
                "term, in_progress or close"
            )

    async def forward_or_fail(self, request: messages_pb2.ConsumeRequest) -> None:
        """`forward`; a request that breaks a rule fails the session (see `fail`)."""
        try:
            await self.forward(request)
        except TamtoError as exc:
            self.fail(exc)

    async def serve(self, reader: asyncio.Task[None]) -> AsyncIterator[bytes]:
        """What the client's stream sends: `responses`, then, after the client's
        half-close, `finish`. On an error its status goes in-band first and is
        raised once `reader` (the client's requests) ended or `END_WAIT_S` passed,
        so that no write of the client races with the end of its stream."""
        try:
            async for response in self.responses():
                yield response
            await self.finish()
        except TamtoError as exc:
            yield consume_error(*in_band_status(exc))
            await asyncio.wait({reader}, timeout=END_WAIT_S)
            raise

    def _wake(self) -> None:
        if self._out.empty():  # wake a `responses` waiting for the next one
            self._out.put_nowait(WAKE)

    def responses(self) -> AsyncIterator[bytes]:
        """The routers' responses, merged, as encoded `ConsumeResponse` bytes, until
        the session stops (`SessionStop`)."""
        return self.drain(self._out)

    async def finish(self, timeout_s: float = 10.0) -> None:
        """The client half-closed: half-close every router stream and let them end.

        Routers apply (and persist) every ack they were sent before their stream
        ends, so waiting here is what makes a consumer's final acks stick.
        """
        self._finishing = True
        while not self._out.empty():
            self._out.get_nowait()  # nobody reads what is left
        for address, call in self._calls.items():
            if address not in self._ending:
                with contextlib.suppress(Exception):
                    await call.done_writing()
        if self._open_sessions:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._all_ended.wait()

    async def close(self) -> None:
        """Cancel the router sessions: on a mux one message each, at once; a
        `Consume` stream of its own in its turn (`Upstream.consume_setups`), as
        cancelling a gRPC call is gRPC core's work on the event loop."""
        self._upstream.follower.discard(self)
        try:
            for address, call in self._calls.items():
                if isinstance(call, MuxSession):
                    call.cancel()
                    continue
                async with self._upstream.consume_setups(address):
                    call.cancel()
        finally:  # also when cancelled while waiting: never leave a router stream open
            for call in self._calls.values():
                call.cancel()
            for task in self._tasks:
                task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


class _Listener:
    """A mux session's responses and end, handed to its `FanOut` by the mux's reader
    (`MuxSession.listen`), as a pump hands over a router `Consume` stream's."""

    def __init__(self, fan_out: FanOut, address: str) -> None:
        self._fan_out = fan_out
        self._address = address

    def on_response(self, response: bytes) -> None:
        self._fan_out._deliver(response)

    def on_end(self, error: TamtoError | None) -> None:
        self._fan_out._session_ended(self._address, error)
