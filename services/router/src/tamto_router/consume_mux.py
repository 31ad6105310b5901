"""The router's side of `Router.ConsumeMux`: one gateway's consume sessions on one
stream (one stream per gateway instead of one per consumer, so that
thousands of consumers attaching or leaving cost the gateway messages, not gRPC
calls). The gateway's side is `tamto_gateway.consume_mux`.

`ConsumeMux` keeps the stream's sessions and hands each request to its session
without ever waiting on one: each session runs as its own task, reading its
requests in order from its inbox, so a session stuck (attaching, applying) or
failing stalls and ends only itself. Responses of every session go to `out`
(None once the gateway half-closed and every session ended); `out` needs no
bound of its own, as a session delivers only the credit the gateway granted it.

What a request and a response are is the adapter's (`grpc_api`): the mux passes
a session's requests on without looking into them, runs the session with the
adapter's `run` (its encoded responses) and ends it with the adapter's `end`
(the encoded end of the session, from the error that ended it, or None).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from tamto_common.errors import ResourceExhausted

#: Largest the responses a mux sends in one message get (one delivery may be larger).
MUX_BATCH_BYTES = 1 << 20

#: Requests of one mux message dispatched per event-loop round: a crowd's
#: subscribes (or cancels) arrive by the thousand in a message, and the sessions
#: they start (or end) run in the round after; unpaced, one round held the loop
#: for 0.96 s and the publishes behind it.
MUX_DISPATCH_ROUND = 32

#: Most requests one mux session may have waiting to be applied (its acks are
#: applied one after the other, each before the next request): a consumer sending
#: faster than that fails alone, with RESOURCE_EXHAUSTED, not its whole mux.
MUX_SESSION_QUEUE = 10_000

Request = TypeVar("Request")
Message = TypeVar("Message")


@dataclass
class _Session(Generic[Request]):
    #: Its requests not applied yet, in order; None: the gateway half-closed it.
    inbox: asyncio.Queue[Request | None]
    task: asyncio.Task[None] | None = None


class ConsumeMux(Generic[Request]):
    """The sessions of one mux stream (see the module's docstring).

    `run(session, first request, next requests)` is a session's encoded responses;
    `end(session, error or None)` the encoded end of a session.
    """

    def __init__(
        self,
        run: Callable[[int, Request, AsyncIterator[Request]], AsyncIterator[bytes]],
        end: Callable[[int, Exception | None], bytes],
    ) -> None:
        self._run_session = run
        self._end_session = end
        self._sessions: dict[int, _Session[Request]] = {}
        self._highest = 0  # session ids only grow: one at or below this has ended
        self.out: asyncio.Queue[bytes | None] = asyncio.Queue()

    @property
    def sessions(self) -> int:
        return len(self._sessions)

    async def read(
        self, messages: AsyncIterator[Iterable[Message]], dispatch: Callable[[Message], None]
    ) -> None:
        """Hand each request of the gateway's messages to `dispatch` (which calls
        `consume`, `end` or `cancel`); once the gateway half-closes, end every
        session cleanly and then the stream."""
        async for message in messages:
            for n, request in enumerate(message, 1):
                dispatch(request)
                if n % MUX_DISPATCH_ROUND == 0:
                    await asyncio.sleep(0)  # let the sessions just opened or cancelled run
        for session in list(self._sessions.values()):
            session.inbox.put_nowait(None)
        tasks = [s.task for s in self._sessions.values() if s.task is not None]
        if tasks:
            await asyncio.wait(tasks)
        self.out.put_nowait(None)

    def consume(self, sid: int, request: Request) -> None:
        """A request of session `sid` (its first opens it); never waits."""
        session = self._sessions.get(sid)
        if session is None:
            if sid > self._highest:
                self._highest = sid
                self._open(sid, request)
            return  # a session that ended: what was in flight for it is moot
        if session.inbox.qsize() >= MUX_SESSION_QUEUE:
            self._abandon(sid)
            error = ResourceExhausted(
                f"consume session sent more than {MUX_SESSION_QUEUE} requests its "
                "router had not applied yet"
            )
            self.out.put_nowait(self._end_session(sid, error))
            return
        session.inbox.put_nowait(request)

    def end(self, sid: int) -> None:
        """The gateway half-closed session `sid`: it applies what it got and ends cleanly."""
        self._highest = max(self._highest, sid)
        session = self._sessions.get(sid)
        if session is not None:
            session.inbox.put_nowait(None)

    def cancel(self, sid: int) -> None:
        """Abandon session `sid`: it detaches at once (its unacked messages are
        redelivered)."""
        self._highest = max(self._highest, sid)
        self._abandon(sid)

    async def batches(self) -> AsyncIterator[list[bytes]]:
        """The responses in `out`, what queued while the last message was written
        in one message (up to `MUX_BATCH_BYTES`); ends with the stream."""
        while (first := await self.out.get()) is not None:
            batch, size = [first], len(first)
            while size < MUX_BATCH_BYTES and not self.out.empty():
                response = self.out.get_nowait()
                if response is None:
                    yield batch
                    return
                batch.append(response)
                size += len(response)
            yield batch

    def _open(self, sid: int, first: Request) -> None:
        inbox: asyncio.Queue[Request | None] = asyncio.Queue()
        session = self._sessions[sid] = _Session(inbox)

        async def requests() -> AsyncIterator[Request]:
            while (request := await inbox.get()) is not None:
                yield request

        session.task = asyncio.create_task(self._run(sid, first, requests()))

    async def _run(self, sid: int, first: Request, requests: AsyncIterator[Request]) -> None:
        try:
            async for response in self._run_session(sid, first, requests):
                self.out.put_nowait(response)
            end = self._end_session(sid, None)
        except Exception as exc:  # the session's status; the others go on
            end = self._end_session(sid, exc)
        finally:
            self._sessions.pop(sid, None)
        self.out.put_nowait(end)

    def _abandon(self, sid: int) -> None:
        """Detach the session at once (its unacked messages are redelivered)."""
        session = self._sessions.pop(sid, None)
        if session is not None and session.task is not None:
            session.task.cancel()

    async def abandon_all(self) -> None:
        """The stream ended: abandon every session still open and wait for them."""
        sessions = list(self._sessions.values())
        self._sessions.clear()
        for session in sessions:
            if session.task is not None:
                session.task.cancel()
        for session in sessions:
            if session.task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await session.task
