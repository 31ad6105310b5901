"""Request/reply in the SDK (docs/ephemeral.md, "Request/reply").

- `request` (`client.request`): publish one message naming a response stream the
  server makes, and return the one reply message. The server times the request
  out (the client sets no deadline of its own): no reply in time raises
  `Timeout`; nobody in the cluster consuming the topic raises `NoResponders` at
  once unless `wait_for_responder`; a replier's error status raises its error.
- `gather` (`client.gather`): scatter-gather, every reply that came within the
  timeout (or the first `max_replies`), a replier's error as a `TamtoError` in place.
- `reply` (`client.reply`) answers a response stream; `ReplyHandler`
  (`client.reply_handler`) answers every request a subscription receives with
  what its handler returns (bytes, a `Reply` or a message), or with an error
  status when the handler raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import math
import warnings
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc

from tamto_protocol.batch import decode_batch
from tamto_protocol.capabilities import SINGLE_MESSAGE_METADATA
from tamto_protocol.pipelined import Encode, PipelinedCalls
from tamto_protocol.v1 import gateway_pb2, messages_pb2
from tamto_sdk._calls import Calls
from tamto_sdk._lifecycle import AsyncClosing
from tamto_sdk.ephemeral_messages import EphemeralBatch, EphemeralMessage, encode_messages
from tamto_sdk.ephemeral_subscription import EphemeralSubscription
from tamto_sdk.errors import (
    Closed,
    InvalidArgument,
    NotFound,
    TamtoError,
    Unauthenticated,
    from_rpc_error,
    from_status,
)

__all__ = ["Reply", "ReplyHandler"]

#: The longest a request may wait (the server refuses more with InvalidArgument).
MAX_REQUEST_TIMEOUT_S = 600.0
#: The longest message of a reply's error status the server takes, in bytes.
MAX_ERROR_MESSAGE_BYTES = 4096


@dataclass(frozen=True, slots=True)
class Reply:
    """What a reply handler may return: a reply message with a key and headers."""

    payload: bytes
    key: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _ReplyMessage(EphemeralMessage):
    """The reply `request` returns: one message. Iterating it, as code written when
    `request` returned a batch does, yields that message (deprecated)."""

    def __iter__(self) -> Iterator[EphemeralMessage]:
        _deprecated()
        return iter((self,))

    def __len__(self) -> int:
        _deprecated()
        return 1


def _deprecated() -> None:
    warnings.warn(
        "request() returns one message: iterating it (as a batch) is deprecated",
        DeprecationWarning,
        stacklevel=3,
    )


ReplyValue = bytes | Reply | EphemeralMessage
Handler = Callable[[EphemeralMessage], ReplyValue | Awaitable[ReplyValue]]


def timeout_ms(timeout_s: float | None) -> int:
    """A request's timeout on the wire (0: the stream's default); `InvalidArgument`
    for a value that is not a positive number of seconds."""
    if timeout_s is None:
        return 0
    if (
        not isinstance(timeout_s, int | float)
        or isinstance(timeout_s, bool)
        or math.isnan(timeout_s)
        or timeout_s <= 0
    ):
        raise InvalidArgument(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    return max(1, math.ceil(timeout_s * 1000))


async def _call(
    calls: Calls, encode: Encode, raw: PipelinedCalls | None = None, timeout_s: float | None = None
) -> Any:
    """Send a Request (pipelined; `raw`: another method's calls, such as Reply's, with
    `timeout_s`), renewing the token once if refused; no retries, so no backoff to set
    up per call."""
    for attempt in (1, 2):
        metadata = await calls.auth.metadata()
        try:
            # No deadline of our own for a request: the server answers DEADLINE_EXCEEDED.
            return await (raw or calls.request_raw)(encode, metadata=metadata, timeout=timeout_s)
        except grpc.aio.AioRpcError as exc:
            error = from_rpc_error(exc)
            if isinstance(error, Unauthenticated) and attempt == 1:
                await calls.auth.renew_after_rejection(metadata)
                continue
            raise error from None
    raise AssertionError("unreachable")


def _answer_message(answer: Any, response_stream: str) -> EphemeralMessage:
    """The reply an answer (`RequestResponse` or `GatheredReply`) carries: one
    message, or the first of a batch."""
    if not answer.HasField("message"):
        return _reply_message(answer.batch, response_stream)
    single = answer.message
    return _ReplyMessage(
        response_stream,
        "",
        single.payload,
        single.key if single.HasField("key") else None,
        dict(single.headers),
        response_stream,
    )


def _reply_message(batch: messages_pb2.RecordBatch, response_stream: str) -> EphemeralMessage:
    """The first message of a reply's batch (a replier sends one)."""
    decoded = EphemeralBatch(
        stream=response_stream,
        topic="",
        record_batch=decode_batch(batch.arrow_ipc),
        response_stream=response_stream,
    )
    first = next(iter(decoded), None)
    if first is None:
        return _ReplyMessage(response_stream, "", b"", response_stream=response_stream)
    return _ReplyMessage(first.stream, "", first.payload, first.key, first.headers, response_stream)


@dataclass(frozen=True, slots=True)
class Ask:
    """A request as `Client.request` and `Client.gather` take it: the one message
    published and how long, and whether, to wait for its replies."""

    stream: str
    payload: bytes
    topic: str
    timeout_s: float | None
    key: bytes | None
    headers: Mapping[str, str] | None
    wait_for_responder: bool


async def _ask(calls: Calls, ask: Ask, **fields: Any) -> Any:
    """Send `ask` as a RequestRequest (with the other `fields` set) and return the
    gateway's RequestResponse."""
    message = gateway_pb2.RequestRequest(
        stream=ask.stream,
        topic=ask.topic,
        timeout_ms=timeout_ms(ask.timeout_s),
        wait_for_responder=ask.wait_for_responder,
        **fields,
    )
    encode = _one_message(calls.request_raw, message, ask.payload, ask.key, ask.headers)
    return await _call(calls, encode)


async def request(calls: Calls, ask: Ask, response_stream: str) -> EphemeralMessage:
    """Publish a request and return its reply (see `Client.request`)."""
    response = await _ask(calls, ask, response_stream=response_stream)
    return _answer_message(response, response.response_stream)


async def gather(calls: Calls, ask: Ask, max_replies: int) -> list[EphemeralMessage | TamtoError]:
    """Publish a request and return the replies that came in time (see `Client.gather`)."""
    if not isinstance(max_replies, int) or max_replies < 0:
        raise InvalidArgument(f"max_replies must be 0 (no limit) or more, got {max_replies!r}")
    response = await _ask(calls, ask, gather=True, max_replies=max_replies)
    name = response.response_stream
    replies: list[EphemeralMessage | TamtoError] = []
    for gathered in response.replies:
        if gathered.error.code:
            replies.append(from_status(_status_code(gathered.error.code), gathered.error.message))
        else:
            replies.append(_answer_message(gathered, name))
    return replies


def _status_code(number: int) -> grpc.StatusCode:
    return next((c for c in grpc.StatusCode if c.value[0] == number), grpc.StatusCode.UNKNOWN)


async def reply(
    calls: Calls,
    response_stream: str,
    payload: bytes,
    key: bytes | None,
    headers: Mapping[str, str] | None,
) -> None:
    """Answer a request (see `Client.reply`, which holds the defaults)."""
    message = gateway_pb2.ReplyRequest(response_stream=response_stream)
    await _send_reply(calls, _one_message(calls.reply_raw, message, payload, key, headers))


async def reply_error(calls: Calls, response_stream: str, error: BaseException) -> None:
    """Answer a request with an error status (see `Client.reply_error`)."""
    message = gateway_pb2.ReplyRequest(response_stream=response_stream)
    code, text = error_status(error)
    message.error.code = code
    message.error.message = text
    await _send_reply(calls, functools.partial(_with_call_id, message))


def error_status(error: BaseException) -> tuple[int, str]:
    """The status code and message a reply carries for `error`: a `TamtoError`'s own
    code (UNKNOWN for one without a valid code), UNKNOWN with the exception's type
    for any other; the message cut to what the server takes."""
    code = grpc.StatusCode.UNKNOWN
    if isinstance(error, TamtoError):
        code = getattr(grpc.StatusCode, error.code, grpc.StatusCode.UNKNOWN)
        text = error.message
    else:
        text = f"{type(error).__name__}: {error}"
    if code is grpc.StatusCode.OK:
        code = grpc.StatusCode.UNKNOWN
    cut = text.encode()[:MAX_ERROR_MESSAGE_BYTES].decode(errors="ignore")
    return int(code.value[0]), cut


async def _send_reply(calls: Calls, encode: Encode) -> None:
    if calls.closed:
        raise Closed("client is closed")
    await _call(calls, encode, calls.reply_raw, calls.options.rpc_timeout_s)


def _one_message(
    raw: PipelinedCalls,
    message: Any,
    payload: bytes,
    key: bytes | None,
    headers: Mapping[str, str] | None,
) -> Encode:
    """Encodes `message` (a RequestRequest or ReplyRequest) carrying one message, as a
    `SingleMessage` when the gateway at the other end of `raw` reads one (it said so
    when the stream opened), else as a one-message batch."""
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise InvalidArgument(f"payload must be bytes, got {type(payload).__name__}")
    if key is not None and not isinstance(key, bytes | bytearray | memoryview):
        raise InvalidArgument(f"key must be bytes or None, got {type(key).__name__}")
    if headers and not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise InvalidArgument("headers must map strings to strings")

    def encode(call_id: int) -> bytes:
        if SINGLE_MESSAGE_METADATA in raw.peer_says:
            message.ClearField("batch")
            single = message.message
            single.payload = bytes(payload)
            if key is not None:
                single.key = bytes(key)
            if headers:
                single.headers.update(headers)
        else:
            message.ClearField("message")
            message.batch.CopyFrom(encode_messages([payload], [key], [headers]))
        return _with_call_id(message, call_id)

    return encode


def _with_call_id(message: Any, call_id: int) -> bytes:
    """`message` encoded as the request of pipelined call `call_id` (Request and
    Reply go pipelined on a stream each, `tamto_protocol.pipelined`)."""
    message.call_id = call_id
    return bytes(message.SerializeToString())


def _reply_request(calls: Calls, response_stream: str, value: object) -> Encode:
    """The reply for what a handler returned: bytes, a `Reply` or a message."""
    message = gateway_pb2.ReplyRequest(response_stream=response_stream)
    if isinstance(value, bytes | bytearray | memoryview):
        return _one_message(calls.reply_raw, message, bytes(value), None, None)
    if isinstance(value, Reply | EphemeralMessage):
        return _one_message(calls.reply_raw, message, value.payload, value.key, dict(value.headers))
    raise TypeError(
        f"a reply handler returns bytes, a Reply or a message, not {type(value).__name__}"
    )


class ReplyHandler(AsyncClosing):
    """Answers the requests an ephemeral stream receives with `handler(message)`
    (sync or async); use it as an async context manager, or `start` and `close` it.

    The handler returns the reply: bytes (the payload), a `Reply` (payload, key,
    headers) or a message. A handler that raises answers with an error status
    instead, which the requester raises: a `TamtoError`'s own (raise
    `InvalidArgument` to refuse a request), UNKNOWN naming any other exception.

    Messages without a response stream are passed over. Up to `concurrency`
    requests are handled at once. Replies sent are counted in `answered`, a reply
    to a request that has meanwhile expired in `expired`, a handler that raised
    (or a reply that could not be sent) in `failed`.
    """

    def __init__(
        self,
        calls: Calls,
        subscription: EphemeralSubscription,
        handler: Handler,
        concurrency: int = 16,
    ) -> None:
        if concurrency < 1:
            raise InvalidArgument(f"concurrency must be at least 1, got {concurrency}")
        self._calls = calls
        self._subscription = subscription
        self._handler = handler
        self._slots = asyncio.Semaphore(concurrency)
        self._running: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None
        self.answered = 0
        self.expired = 0
        self.failed = 0

    async def start(self) -> ReplyHandler:
        await self._subscription.start()
        self._task = asyncio.create_task(self._run(), name="tamto-reply-handler")
        return self

    async def _run(self) -> None:
        async for message in self._subscription:
            if not message.response_stream:
                continue
            await self._slots.acquire()
            task = asyncio.create_task(self._answer(message))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _answer(self, message: EphemeralMessage) -> None:
        try:
            try:
                result = self._handler(message)
                if inspect.isawaitable(result):
                    result = await result
                answer = _reply_request(self._calls, message.response_stream, result)
            except Exception as exc:
                self.failed += 1
                await reply_error(self._calls, message.response_stream, exc)
            else:
                await _send_reply(self._calls, answer)
                self.answered += 1
        except NotFound:
            self.expired += 1
        except Exception:
            self.failed += 1
        finally:
            self._slots.release()

    async def close(self) -> None:
        await self._subscription.close()
        for task in [t for t in (self._task, *self._running) if t is not None]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, TamtoError):
                await task

    async def _open(self) -> None:
        await self.start()
