"""Unary calls pipelined on one long-lived bidirectional gRPC stream: the client side.

A unary call in grpc.aio costs ~0.55 ms of CPU here (client and server together,
measured between two processes); one request/response on an open stream costs
~0.22 ms. The publish path makes one call per batch at every hop (SDK → gateway
→ router → storage), so it sends them as messages of one stream per peer
instead: `PipelinedCalls` numbers each request with a `call_id`, writes it, and
resolves the caller when the response with that `call_id` comes back (responses
may come in any order). The server side is `tamto_common.pipelined`.

To its callers it looks like a unary multicallable, `await calls(request,
timeout=, metadata=)`, except that `request` is a function from the call id to
the encoded request (the wire encoders write the id in the same join as the
batch bytes, so no extra copy). Failures are raised as `grpc.aio.AioRpcError`
with the status the unary call would have ended with, so each caller's one
error translation stays as it is. Given the unary method too (`fallback`),
calls go through it once the peer answers the stream UNIMPLEMENTED: a peer
from before pipelined calls, met during a rolling upgrade. The stream is tried
again `STREAM_RETRY_S` later, so a peer upgraded meanwhile gets streams again
without the caller restarting. A request whose write failed never left, so it
goes unary too, whatever the stream's status: the first write to a peer without
the method can race with its UNIMPLEMENTED, and gRPC then reports INTERNAL
("Internal error from Core") in place of the status.

Several calls per stream message (`more_calls`, the field number of the request
type's `repeated ... more_calls`): each gRPC message costs both ends far more
than its bytes, so calls made in the same turn of the event loop (many requests
woken by one answer message) or while a write is in progress go out together in
one message, the first call's encoding followed by the others' as that
field, once the peer said it reads them (initial metadata `tamto-more-calls`).
The stream is opened with metadata `tamto-more-answers`, and answers carried in
an answer's `more_answers` are taken as they come. A peer that says nothing gets
one call per message, as before. What the peer said in its initial metadata is
`peer_says`: a caller may write its requests in a newer form only a peer that
says so reads (`tamto_protocol.single_message`), and sends `opening_metadata`
to say what it reads itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from tamto_protocol.wire import len_header, raw_unary

#: A gRPC status code by its number (a `CallStatus.code`).
_CODES = {code.value[0]: code for code in grpc.StatusCode}

Encode = Callable[[int], bytes]
Metadata = Sequence[tuple[str, str]]

#: Metadata of several calls per message: the server's initial metadata says it
#: reads `more_calls`; the client's request metadata says it reads `more_answers`.
MORE_CALLS_METADATA = "tamto-more-calls"
MORE_ANSWERS_METADATA = "tamto-more-answers"
#: The most calls one stream message carries.
MOST_CALLS_PER_MESSAGE = 64

#: How long calls go unary after the peer answered the stream UNIMPLEMENTED,
#: before the stream is tried again (one failed attempt costs one round trip).
STREAM_RETRY_S = 60.0


def rpc_error(code: grpc.StatusCode, details: str, trailing: Metadata = ()) -> grpc.aio.AioRpcError:
    """An `AioRpcError` as a unary call ending with `code` (and `trailing` metadata)
    would raise."""
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailing), details)


class _NotSent(Exception):
    """The request's write failed: it never reached the peer (`error` says why)."""

    def __init__(self, error: grpc.aio.AioRpcError) -> None:
        super().__init__(error)
        self.error = error


class _Stream:
    """One open stream: its call, its calls waiting for a response, and its reader."""

    def __init__(self, call: Any, metadata: Metadata | None) -> None:
        self.call = call
        self.metadata = metadata
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.write_lock = asyncio.Lock()  # grpc allows one write in progress per call
        self.failure: grpc.aio.AioRpcError | None = None
        self.reader: asyncio.Task[None] | None = None
        self.closer: asyncio.Task[None] | None = None
        #: The peer reads several calls per message (`PipelinedCalls` docstring).
        self.coalesce = False
        #: Calls waiting for the write in progress to go out together after it.
        self.queued: list[tuple[bytes, asyncio.Future[None]]] = []
        self.flusher: asyncio.Task[None] | None = None

    def finish_writing(self) -> None:
        """Half-close once the writes in progress are done: the server answers what
        it has, then ends the stream (and so the reader)."""

        async def close_when_written() -> None:
            async with self.write_lock:
                with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
                    await self.call.done_writing()

        self.closer = asyncio.get_running_loop().create_task(close_when_written())

    async def stop(self) -> None:
        """Cancel the call and wait for its tasks to end."""
        self.call.cancel()
        for task in (self.closer, self.reader, self.flusher):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def fail(self, error: grpc.aio.AioRpcError) -> None:
        """The stream is gone: every call still waiting fails with `error`."""
        if self.failure is None:
            self.failure = error
        queued, self.queued = self.queued, []
        for _, written in queued:
            if not written.done():
                written.set_exception(error)
        for future in self.waiting.values():
            if not future.done():
                future.set_exception(error)
        self.waiting.clear()


def _settle(
    batch: list[tuple[bytes, asyncio.Future[None]]], outcome: grpc.aio.AioRpcError | None
) -> None:
    """Resolve the writes of `batch` not yet resolved: written, or failed with `outcome`."""
    for _, written in batch:
        if written.done():
            continue
        if outcome is None:
            written.set_result(None)
        else:
            written.set_exception(outcome)


class PipelinedCalls:
    """Calls of one stream method (`method`, a full name such as
    ``/tamto.v1.Router/AppendStream``) on `channel`, one stream at a time.

    The stream opens on the first call and again after it failed; a call with
    other `metadata` than the open stream's (a renewed token) opens a new one and
    lets the old one finish its calls. `close` ends the stream and its reader.
    `fallback` is the unary method and its response type, if the peer may lack
    the stream method; `clock` (monotonic seconds) times the retry of the stream.
    """

    def __init__(
        self,
        channel: grpc.aio.Channel,
        method: str,
        response_type: Any,
        fallback: tuple[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        more_calls: int = 0,
        opening_metadata: Metadata = (),
    ) -> None:
        self._open_stream = channel.stream_stream(
            method, request_serializer=None, response_deserializer=response_type.FromString
        )
        self._unary = None if fallback is None else raw_unary(channel, *fallback)
        self._unary_until = -math.inf  # calls go unary before this time (`clock`)
        self._clock = clock
        self._method = method
        self._current: _Stream | None = None
        self._draining: set[_Stream] = set()
        self._next_id = 1
        self._closed = False
        self._more_calls = more_calls
        self._opening_metadata = tuple(opening_metadata)
        #: Stream messages written (fewer than calls when several go together).
        self.messages_written = 0
        #: The metadata keys the peer sent when the latest stream opened (what it
        #: reads besides the plain calls; empty until known, and on the unary path).
        self.peer_says: frozenset[str] = frozenset()

    async def __call__(
        self,
        request: Encode,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the signature of a unary call
        metadata: Metadata | None = None,
    ) -> Any:
        """Send `request(call_id)` and return the `response` of its answer."""
        if self._closed:
            raise rpc_error(grpc.StatusCode.CANCELLED, f"{self._method}: calls closed")
        if self._unary is not None and self._clock() < self._unary_until:
            return await self._unary(request(0), timeout=timeout, metadata=metadata)
        started = time.monotonic()
        try:
            answer = await self._exchange(request, timeout, metadata)
        except _NotSent as unsent:
            if self._unary is None:
                raise unsent.error from None
            if unsent.error.code() is grpc.StatusCode.UNIMPLEMENTED:
                self._unary_until = self._clock() + STREAM_RETRY_S
            # Nothing of it was handled, so unary is safe (module docstring).
            left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
            return await self._unary(request(0), timeout=left, metadata=metadata)
        except grpc.aio.AioRpcError as exc:
            if exc.code() is not grpc.StatusCode.UNIMPLEMENTED or self._unary is None:
                raise
            # The peer has no such stream method, so it handled nothing of this call.
            self._unary_until = self._clock() + STREAM_RETRY_S
            return await self._unary(request(0), timeout=timeout, metadata=metadata)
        status = answer.status
        if status.code:
            raise rpc_error(
                _CODES.get(status.code, grpc.StatusCode.UNKNOWN),
                status.message,
                tuple(status.trailing_metadata.items()),
            )
        return answer.response

    async def _exchange(
        self, request: Encode, timeout_s: float | None, metadata: Metadata | None
    ) -> Any:
        """Write the request on the stream and wait for its answer."""
        stream = self._stream(metadata)
        call_id = self._next_id
        self._next_id += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        stream.waiting[call_id] = future
        try:
            async with asyncio.timeout(timeout_s):
                try:
                    await self._write(stream, request(call_id))
                except grpc.aio.AioRpcError as exc:
                    raise _NotSent(exc) from None
                answer = await future
        except TimeoutError:
            raise rpc_error(
                grpc.StatusCode.DEADLINE_EXCEEDED, f"{self._method}: no answer in {timeout_s} s"
            ) from None
        finally:
            stream.waiting.pop(call_id, None)
            if not future.done():
                future.cancel()
            elif not future.cancelled():
                # A failed write fails every waiting call, this one too, and raises
                # the error itself: take it from the future, or asyncio reports it
                # as never retrieved.
                future.exception()
        return answer

    async def close(self) -> None:
        """End the streams (calls still waiting fail with CANCELLED) and their readers."""
        self._closed = True
        streams = [*self._draining, *([self._current] if self._current else [])]
        self._current = None
        self._draining.clear()
        for stream in streams:
            stream.fail(rpc_error(grpc.StatusCode.CANCELLED, f"{self._method}: calls closed"))
            await stream.stop()

    def _stream(self, metadata: Metadata | None) -> _Stream:
        current = self._current
        if current is not None and current.failure is None:
            if current.metadata == metadata:
                return current
            # Newer credentials: the old stream finishes its calls, then ends.
            self._draining.add(current)
            current.finish_writing()
        opening = metadata
        if self._more_calls:
            opening = (*(metadata or ()), (MORE_ANSWERS_METADATA, "1"))
        if self._opening_metadata:
            opening = (*(opening or ()), *self._opening_metadata)
        stream = _Stream(self._open_stream(metadata=opening), metadata)
        self.peer_says = frozenset()  # until this stream's peer says
        stream.reader = asyncio.get_running_loop().create_task(
            self._read(stream), name=f"pipelined-reader {self._method}"
        )
        self._current = stream
        return stream

    async def _write(self, stream: _Stream, data: bytes) -> None:
        if stream.failure is not None:
            raise stream.failure
        if stream.coalesce:
            # Goes out with the others made in the same turn of the event loop, or
            # while the write in progress lasts: the flusher writes on its next turn.
            written: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            stream.queued.append((data, written))
            if stream.flusher is None or stream.flusher.done():
                stream.flusher = asyncio.get_running_loop().create_task(self._flush(stream))
            await written
            return
        async with stream.write_lock:
            await self._write_message(stream, data)

    async def _flush(self, stream: _Stream) -> None:
        """Write the queued calls, several per message, until none is left."""
        cancelled = rpc_error(grpc.StatusCode.CANCELLED, f"{self._method}: calls closed")
        batch: list[tuple[bytes, asyncio.Future[None]]] = []
        outcome: grpc.aio.AioRpcError | None = cancelled
        try:
            while stream.queued:
                outcome = cancelled  # until this batch's write is done
                async with stream.write_lock:
                    batch = stream.queued[:MOST_CALLS_PER_MESSAGE]
                    del stream.queued[:MOST_CALLS_PER_MESSAGE]
                    first, *others = [data for data, _ in batch]
                    more = [len_header(self._more_calls, len(d)) + d for d in others]
                    try:
                        await self._write_message(stream, b"".join([first, *more]))
                    except grpc.aio.AioRpcError as exc:
                        outcome = exc
                    else:
                        outcome = None
                _settle(batch, outcome)
        finally:
            # Cancelled mid-write (the stream stopped): its calls fail, none waits on.
            _settle(batch, outcome)

    async def _write_message(self, stream: _Stream, data: bytes) -> None:
        if stream.failure is not None:
            raise stream.failure
        try:
            await stream.call.write(data)
            self.messages_written += 1
        except grpc.aio.AioRpcError as exc:
            stream.fail(exc)
            raise
        except (asyncio.InvalidStateError, grpc.aio.UsageError) as exc:
            # The call ended between the check and the write: its reader has the status.
            error = stream.failure or rpc_error(
                grpc.StatusCode.UNAVAILABLE, f"{self._method}: stream ended ({exc})"
            )
            stream.fail(error)
            raise error from None

    @staticmethod
    def _answered(stream: _Stream, answer: Any) -> None:
        future = stream.waiting.get(answer.call_id)
        if future is not None and not future.done():
            future.set_result(answer)

    async def _read(self, stream: _Stream) -> None:
        """Resolve each waiting call with its answer; fail the rest when the stream ends."""
        error = rpc_error(grpc.StatusCode.UNAVAILABLE, f"{self._method}: stream ended")
        try:
            if self._more_calls or self._opening_metadata:
                metadata = await stream.call.initial_metadata()
                self.peer_says = frozenset(k for k, _ in metadata or ())
                stream.coalesce = bool(self._more_calls) and MORE_CALLS_METADATA in self.peer_says
            async for answer in stream.call:
                self._answered(stream, answer)
                for more in answer.more_answers if self._more_calls else ():
                    self._answered(stream, more)
        except grpc.aio.AioRpcError as exc:
            error = exc
        finally:
            stream.fail(error)
            if self._current is stream:
                self._current = None
            self._draining.discard(stream)
