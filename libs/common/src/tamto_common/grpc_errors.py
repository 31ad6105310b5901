"""Server-side translation of Tamto errors to gRPC statuses: the one place it happens.

Wrap every servicer with `TranslateErrorsInterceptor` (the service runner does):
a `TamtoError` becomes its status and message; anything else is logged and
answered as INTERNAL without leaking internals. A request whose bytes do not
parse is INVALID_ARGUMENT naming its field (`tamto_common.decoding`). Errors
from a downstream service (`grpc.aio.AioRpcError`) keep their status so a
client sees the cause.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aetcd.exceptions as etcd_errors
import grpc
import structlog
from prometheus_client import Histogram

from tamto_common import errors
from tamto_common.decoding import Undecodable, carries_call_id, lenient
from tamto_common.errors import TamtoError, Unavailable

log = structlog.get_logger(__name__)

#: What the etcd client raises when etcd cannot be reached in time.
ETCD_UNREACHABLE = (etcd_errors.ConnectionFailedError, etcd_errors.ConnectionTimeoutError)


#: The longest status message a server sends, in UTF-8 bytes. gRPC carries it in
#: trailing metadata (percent-encoded: up to 3 bytes per byte), whose default
#: limit is 8 KiB; a message over it (a schema quoted whole, 955,143 characters)
#: turned the status into RESOURCE_EXHAUSTED about the metadata.
MAX_ERROR_MESSAGE_BYTES = 1536


def capped(message: str) -> str:
    """`message` if it fits `MAX_ERROR_MESSAGE_BYTES`, else its start and how much
    was cut."""
    data = message.encode("utf-8", "replace")
    if len(data) <= MAX_ERROR_MESSAGE_BYTES:
        return message
    head = data[: MAX_ERROR_MESSAGE_BYTES - 48].decode("utf-8", "ignore")
    return f"{head}... ({len(message) - len(head)} more characters)"


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str] | None:
    """The status and message (`capped`) for an exception, or None for an unexpected one."""
    status = _status_for(exc)
    return None if status is None else (status[0], capped(status[1]))


def in_band_status(exc: TamtoError) -> tuple[int, str]:
    """The status code number and message (`capped`) a stream announces in-band."""
    return exc.code.value[0], capped(str(exc))


def _status_for(exc: BaseException) -> tuple[grpc.StatusCode, str] | None:
    if isinstance(exc, TamtoError):
        return exc.code, str(exc)
    if isinstance(exc, ETCD_UNREACHABLE):
        # etcd down, restarting or paused: a call that needed it may succeed soon.
        return grpc.StatusCode.UNAVAILABLE, f"etcd unavailable: {exc}"
    if isinstance(exc, grpc.aio.AioRpcError):
        code = exc.code()
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return grpc.StatusCode.UNAVAILABLE, f"upstream unavailable: {exc.details()}"
        return code, exc.details() or code.name
    return None


def trailing_metadata_for(exc: BaseException) -> tuple[tuple[str, str], ...]:
    """The trailing metadata a call failing with `exc` ends with (a redirect's owner,
    a request's `tamto-no-responders`)."""
    if isinstance(exc, TamtoError):
        return exc.trailing_metadata()
    return ()


def downstream_error(exc: grpc.aio.AioRpcError, what: str) -> TamtoError:
    """A downstream call failed: the matching TamtoError, for domain code to raise."""
    status = status_for(exc)
    assert status is not None
    code, message = status
    return error_for(code, f"{what}: {message}")


def error_for(code: grpc.StatusCode | int, message: str) -> TamtoError:
    """The TamtoError for a status (a code or its number) a downstream service sent."""
    if isinstance(code, int):
        code = next((c for c in grpc.StatusCode if c.value[0] == code), grpc.StatusCode.UNKNOWN)
    return _BY_CODE.get(code, Unavailable)(message)


_BY_CODE: dict[grpc.StatusCode, type[TamtoError]] = {
    cls.code: cls
    for cls in (
        errors.InvalidArgument,
        errors.OutOfRange,
        errors.NotFound,
        errors.AlreadyExists,
        errors.FailedPrecondition,
        errors.Unauthenticated,
        errors.PermissionDenied,
        errors.Unavailable,
        errors.ResourceExhausted,
        errors.DataLoss,
    )
}


RPC_SECONDS = Histogram(
    "tamto_rpc_server_seconds",
    "Server-side gRPC call duration (streams: the whole stream), by method and status",
    ["method", "code"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 60),
)


#: `RPC_SECONDS` children by (method, code), looked up once each: `labels` takes a
#: lock and builds a key on every call, a few percent of a gateway's CPU while a
#: crowd of consumer streams comes and goes.
_RPC_TIMERS: dict[tuple[str, str], Histogram] = {}


def _observe(method: str, code: str, seconds: float) -> None:
    timer = _RPC_TIMERS.get((method, code))
    if timer is None:
        timer = _RPC_TIMERS[(method, code)] = RPC_SECONDS.labels(method, code)
    timer.observe(seconds)


async def _abort(context: grpc.aio.ServicerContext, exc: BaseException, method: str) -> None:
    """Answer the call with the status for `exc` (raises AbortError, as grpc does)."""
    status = status_for(exc)
    if status is None:
        log.exception("unhandled error", method=method)
        status = (grpc.StatusCode.INTERNAL, "internal error")
    await context.abort(status[0], status[1], trailing_metadata_for(exc))


@contextlib.asynccontextmanager
async def _translating(
    request: Any, context: grpc.aio.ServicerContext, method: str, cancelled: str
) -> AsyncIterator[None]:
    """One call of a handler: a request that did not decode raises its error, an
    exception becomes the call's status (`_abort`), and the call's duration is
    counted under its status (`cancelled`: the one a cancelled call counts as)."""
    started, code = time.perf_counter(), "OK"
    try:
        if type(request) is Undecodable:
            raise request.error()
        yield
    except asyncio.CancelledError:
        code = cancelled
        raise
    except Exception as exc:
        if isinstance(exc, grpc.aio.AbortError):
            code = "ABORTED_BY_HANDLER"
            raise
        code = status_name(exc)
        await _abort(context, exc, method)
    finally:
        _observe(method, code, time.perf_counter() - started)


def _wrap_unary(behavior: Callable[..., Awaitable[Any]], method: str) -> Callable[..., Any]:
    async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
        # a cancelled unary call counts as OK
        async with _translating(request, context, method, cancelled="OK"):
            return await behavior(request, context)

    return wrapper


def _wrap_stream(behavior: Callable[..., AsyncIterator[Any]], method: str) -> Callable[..., Any]:
    async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        async with _translating(request, context, method, cancelled="CANCELLED"):
            async for item in behavior(request, context):
                yield item

    return wrapper


def status_name(exc: BaseException) -> str:
    status = status_for(exc)
    return status[0].name if status else "INTERNAL"


class TranslateErrorsInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Maps exceptions raised by servicers to gRPC statuses, and times every call.

    This is where a call's final status is known, so the per-method latency
    histogram (`tamto_rpc_server_seconds`) is observed here too. A method's wrapped
    handler is made once and reused while its servicer's handler stays the same.
    """

    def __init__(self) -> None:
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        known = self._wrapped.get(method)
        if known is not None and known[0] is handler:
            return known[1]
        wrapped = _wrap(handler, method)
        self._wrapped[method] = (handler, wrapped)
        return wrapped


#: Each kind of handler: its behaviour's attribute, the factory of its kind, the wrapper.
_KINDS: tuple[tuple[str, Callable[..., grpc.RpcMethodHandler], Callable[..., Any]], ...] = (
    ("unary_unary", grpc.unary_unary_rpc_method_handler, _wrap_unary),
    ("unary_stream", grpc.unary_stream_rpc_method_handler, _wrap_stream),
    ("stream_unary", grpc.stream_unary_rpc_method_handler, _wrap_unary),
    ("stream_stream", grpc.stream_stream_rpc_method_handler, _wrap_stream),
)


def _wrap(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    """`handler` with its behaviour's errors translated and its calls timed, and its
    requests parsed leniently (`tamto_common.decoding`): one that does not parse is
    refused with INVALID_ARGUMENT. On a stream of pipelined calls it reaches the
    handler (`answer_calls` refuses that call alone); on another stream it ends
    the stream with that status, as any other bad request there does."""
    deserializer = handler.request_deserializer
    for kind, make, wrap in _KINDS:
        behavior = getattr(handler, kind)
        if behavior:
            if deserializer is not None:
                if handler.request_streaming and not carries_call_id(deserializer):
                    behavior = _refusing_undecodable(behavior)
                deserializer = lenient(deserializer)
            return make(
                wrap(behavior, method),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
    return handler


def _refusing_undecodable(behavior: Callable[..., Any]) -> Callable[..., Any]:
    """A stream handler whose requests end with the refusal of the first that did not
    parse."""

    def with_requests(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
        return behavior(_decoded(requests), context)

    return with_requests


async def _decoded(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for request in requests:
        if type(request) is Undecodable:
            raise request.error()
        yield request
