"""Unary calls pipelined on one bidirectional stream: the server side.

The client side and the reason are in `tamto_protocol.pipelined`. Every request
carries a non-zero `call_id`; `answer_calls` runs the handler of each request
as its own task (so a slow call does not hold back the others, as with unary
calls) and yields one response per request, in the order they finish, holding
the `call_id` and either the handler's result or the status the unary call
would have ended with: the same `status_for` translation the unary
interceptor uses. Each call is timed under the unary method's name in
`tamto_rpc_server_seconds`, so the metric means the same on either path. At
most `max_in_flight` calls of one stream run at once; beyond that the stream
is not read, and HTTP/2 flow control holds the client. A request whose bytes
did not parse (`tamto_common.decoding.Undecodable`) is answered INVALID_ARGUMENT
alone, and the stream goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

import grpc
import structlog

from tamto_common.decoding import Undecodable
from tamto_common.errors import InvalidArgument
from tamto_common.grpc_errors import RPC_SECONDS, status_for, trailing_metadata_for

log = structlog.get_logger(__name__)

#: Calls of one stream handled at once (the SDK keeps one batch per partition in flight).
MAX_IN_FLIGHT = 1024


class _Request(Protocol):
    @property
    def call_id(self) -> int: ...


Request = TypeVar("Request", bound=_Request)


def _status(exc: BaseException, method: str) -> tuple[grpc.StatusCode, str]:
    status = status_for(exc)
    if status is None:
        log.error("unhandled error", method=method, exc_info=exc)
        return grpc.StatusCode.INTERNAL, "internal error"
    return status


def _refusal(request: Undecodable, response_type: Any, method: str) -> Any:
    """The answer to a request that did not parse: INVALID_ARGUMENT for its call_id
    (0 when even that could not be read: no call of the client's is answered, the
    stream goes on)."""
    error = request.error()
    answer = response_type(call_id=request.call_id)
    answer.status.code = error.code.value[0]
    answer.status.message = str(error)
    RPC_SECONDS.labels(method, error.code.name).observe(0)
    return answer


async def answer_calls(
    requests: AsyncIterator[Request | Undecodable],
    handle: Callable[[Request], Awaitable[Any]],
    response_type: Any,
    method: str,
    max_in_flight: int = MAX_IN_FLIGHT,
) -> AsyncIterator[Any]:
    """Yield a `response_type(call_id, status, response)` for every request.

    `method` is the full name of the unary method each call stands for
    (``/tamto.v1.Router/Append``): calls are logged and timed under it.
    """
    answers: asyncio.Queue[Any] = asyncio.Queue()
    slots = asyncio.Semaphore(max_in_flight)
    running: set[asyncio.Task[None]] = set()

    async def run(call_id: int, request: Request) -> None:
        started, code = time.perf_counter(), grpc.StatusCode.OK
        try:
            answer = response_type(call_id=call_id, response=await handle(request))
        except Exception as exc:
            code, message = _status(exc, method)
            answer = response_type(call_id=call_id)
            answer.status.code = code.value[0]
            answer.status.message = message
            answer.status.trailing_metadata.update(trailing_metadata_for(exc))
        finally:
            slots.release()
        RPC_SECONDS.labels(method, code.name).observe(time.perf_counter() - started)
        answers.put_nowait(answer)

    async def read() -> None:
        try:
            async for request in requests:
                if isinstance(request, Undecodable):
                    answers.put_nowait(_refusal(request, response_type, method))
                    continue
                if not request.call_id:
                    raise InvalidArgument(f"{method}: every request needs a non-zero call_id")
                await slots.acquire()
                task = asyncio.create_task(run(request.call_id, request))
                running.add(task)
                task.add_done_callback(running.discard)
        finally:
            answers.put_nowait(None)  # the requests ended: finish once the calls did

    reader = asyncio.create_task(read())
    try:
        while True:
            answer = await answers.get()
            if answer is not None:
                yield answer
            elif running:
                await asyncio.wait(set(running))
                answers.put_nowait(None)  # after their answers
            else:
                # A call that finished after the requests ended queued its answer
                # behind their end: every call is done now, so take what is left.
                while not answers.empty():
                    late = answers.get_nowait()
                    if late is not None:
                        yield late
                reader.result()  # a malformed request ends the stream with its status
                return
    finally:
        reader.cancel()
        for task in [*running]:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
