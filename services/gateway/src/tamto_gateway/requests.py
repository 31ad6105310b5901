"""Response streams (request/reply) at a gateway, with server-side timeouts.

A request is an ephemeral publish that names a response stream. The requester's
gateway makes that stream: it listens on the stream's reply subject on the bus
(`tamto.reply.<name>`), publishes the request, and waits for the first reply up
to the request's timeout (else the stream's `request_timeout_ms`). It answers
the requester with the reply, or with DEADLINE_EXCEEDED when none came: clients
never time out by themselves. Either way the response stream is gone after.

Only the requester receives from a response stream: it exists only at that
gateway, on the bus, never as a stream anyone can subscribe to. A reply is a
bus request to the reply subject: the requester's gateway answers "taken" to
the first, "gone" to any later one or to a name it does not know, and nobody
answers a subject no gateway listens on (NATS's no-responders), so `reply`
refuses all of those with NOT_FOUND.

Names: a request without one gets a unique generated name, `reply-<32 hex>`:
the first 16 are this gateway's broker id, so its replies travel on
`tamto.reply.g.<broker id>.<the other 16>` and one bus subscription per gateway
(`tamto.reply.g.<broker id>.*`) takes them all; a request makes no subscription
of its own. A reply given at the requester's own gateway to a generated name
skips the bus: it completes the waiting request directly. A chosen name is
reserved cluster-wide in etcd (`/tamto/responses/<name>`, bound to this
gateway's lease, so a crashed gateway's names free up) while the request waits,
and gets a subscription on `tamto.reply.<name>` for that time; a name taken, or
naming an existing stream, is ALREADY_EXISTS, and one of the generated form is
the server's to give (INVALID_ARGUMENT).

A request no consuming entity in the cluster matches fails at once with
`NoResponders` (NATS's 503), unless it asked to wait for a responder: the count
is the publishing gateway's (`EphemeralHub.matching_everywhere`, which first
takes in every announcement the bus already holds for it). A reply is a message
(a batch with payload, key and headers) or an error status the request then
ends with (`ReplierError`). A gathering request (scatter-gather) takes every
reply until its timeout or `max_replies` and answers them all, possibly none.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Final

import aetcd
import grpc
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from tamto_common.errors import AlreadyExists, InvalidArgument, NotFound, TamtoError, Unavailable
from tamto_common.membership import KeptLease
from tamto_common.names import check_name
from tamto_common.streams import StreamDef, stream_key
from tamto_gateway.ephemeral import EphemeralHub
from tamto_protocol.single_message import as_batch
from tamto_protocol.v1 import gateway_pb2

RESPONSES_PREFIX: Final = "/tamto/responses/"
REPLY_PREFIX: Final = "tamto.reply"
#: The longest a request may wait for its reply.
MAX_TIMEOUT_MS: Final = 600_000
_TAKEN: Final = b"taken"
_GONE: Final = b"gone"
_LEASE_TTL_S: Final = 10
#: Generated response stream names: the broker id (16 hex), then 16 random hex.
GENERATED: Final = re.compile(r"reply-([0-9a-f]{16})([0-9a-f]{16})")


class RequestTimeout(TamtoError):
    """No reply came within the request's timeout (the server's, not the client's)."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED
    retriable = True


#: Trailing metadata of a request that failed because nobody could answer it.
NO_RESPONDERS_METADATA: Final = "tamto-no-responders"


class NoResponders(Unavailable):
    """No consuming entity in the cluster matches a request's topic (NATS's 503):
    UNAVAILABLE with trailing metadata `tamto-no-responders`, which the SDK raises
    as its `NoResponders`."""

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return ((NO_RESPONDERS_METADATA, "1"),)


class ReplierError(TamtoError):
    """The replier answered a request with an error status: the request ends with it."""

    def __init__(self, code: int, message: str) -> None:
        status = next((c for c in grpc.StatusCode if c.value[0] == code), grpc.StatusCode.UNKNOWN)
        super().__init__(f"the replier answered {status.name}: {message}")
        self.code = status


#: The longest message of a reply's error status, in bytes (UTF-8).
MAX_ERROR_MESSAGE_BYTES: Final = 4096


def check_reply_error(code: int, message: str) -> None:
    """`InvalidArgument` unless (`code`, `message`) can be a reply's error status."""
    if not 1 <= code <= 16:
        raise InvalidArgument(f"error.code must be a gRPC status code from 1 to 16, got {code}")
    if len(message.encode()) > MAX_ERROR_MESSAGE_BYTES:
        raise InvalidArgument(
            f"error.message is {len(message.encode())} bytes; at most "
            f"{MAX_ERROR_MESSAGE_BYTES} are allowed"
        )


@dataclass(frozen=True)
class RequestOptions:
    """How a request waits: see `RequestRequest` in gateway.proto."""

    response_stream: str = ""
    timeout_ms: int = 0
    wait_for_responder: bool = False
    gather: bool = False
    max_replies: int = 0


@dataclass(eq=False)
class _Waiting:
    """A request's replies so far; `done` once it takes no more."""

    gather: bool
    most: int
    done: asyncio.Future[None]
    replies: list[gateway_pb2.ReplyRequest] = field(default_factory=list)

    def close(self) -> None:
        """Take no more replies (the timeout)."""
        if not self.done.done():
            self.done.set_result(None)

    def offer(self, reply: gateway_pb2.ReplyRequest) -> bool:
        """Take `reply` if the request still takes one; whether it did."""
        if self.done.done():
            return False
        self.replies.append(reply)
        if not self.gather or (self.most and len(self.replies) >= self.most):
            self.done.set_result(None)
        return True


def check_timeout_ms(timeout_ms: int) -> int:
    """Return `timeout_ms` if allowed (0: the stream's default), else `InvalidArgument`."""
    if not 0 <= timeout_ms <= MAX_TIMEOUT_MS:
        raise InvalidArgument(
            f"timeout_ms must be between 1 and {MAX_TIMEOUT_MS} (0: the stream's "
            f"request_timeout_ms), got {timeout_ms}"
        )
    return timeout_ms


def reply_subject(response_stream: str) -> str:
    """The bus subject replies to `response_stream` travel on."""
    generated = GENERATED.fullmatch(response_stream)
    if generated:
        return f"{REPLY_PREFIX}.g.{generated[1]}.{generated[2]}"
    # Names hold letters, digits, '.', '_', '-': '.' becomes '~' (in no name).
    return f"{REPLY_PREFIX}.{response_stream.replace('.', '~')}"


class RequestBroker:
    """Makes response streams for requests at this gateway and relays replies."""

    def __init__(self, bus: NatsClient, etcd: aetcd.Client, hub: EphemeralHub) -> None:
        self._bus = bus
        self._etcd = etcd
        self._hub = hub
        self._lease = KeptLease(etcd, _LEASE_TTL_S)
        self._leased = False
        self._leasing = asyncio.Lock()
        self._draining: set[asyncio.Task[None]] = set()
        self._id = secrets.token_hex(8)
        #: Requests waiting on a generated response stream, by the name's random part.
        self._waiting: dict[str, _Waiting] = {}
        self._inbox: Subscription | None = None
        self._inbox_lock = asyncio.Lock()

    async def close(self) -> None:
        for task in list(self._draining):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._inbox is not None:
            with contextlib.suppress(Exception):
                await self._inbox.unsubscribe()
        if self._leased:
            await self._lease.__aexit__(None, None, None)

    async def request(
        self,
        stream: StreamDef,
        topic: str,
        arrow_ipc: bytes,
        count: int,
        options: RequestOptions,
        single: gateway_pb2.SingleMessage | None = None,
    ) -> tuple[str, list[gateway_pb2.ReplyRequest]]:
        """Publish a request and wait for its reply (or, gathering, its replies until
        the timeout or `max_replies`); returns the response stream's name and the
        replies. Raises `NoResponders` when nobody matches (unless it may wait),
        `RequestTimeout` when no reply came in time (unless gathering), and
        `ReplierError` when the reply is an error. `single`: the request as one message
        instead of `arrow_ipc` (`EphemeralHub.publish`)."""
        timeout_ms = check_timeout_ms(options.timeout_ms) or stream.request_timeout_ms
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiting = _Waiting(options.gather, options.max_replies, done)
        async with self._response_stream(options.response_stream, waiting) as name:
            matched = await self._hub.publish(stream, topic, arrow_ipc, count, name, single)
            nobody = not (matched or options.wait_for_responder)
            if nobody and not await self._hub.matching_everywhere(stream.name, topic):
                raise NoResponders(
                    f"no responders: nobody consumes topic {topic!r} of stream "
                    f"{stream.name!r} (wait_for_responder waits for one instead)"
                )
            # A timer, not wait_for: no task, shield and waiter per request.
            timer = asyncio.get_running_loop().call_later(timeout_ms / 1000, waiting.close)
            try:
                await done
            finally:
                timer.cancel()
        if options.gather:
            return name, waiting.replies
        if not waiting.replies:
            raise RequestTimeout(f"no reply on response stream {name!r} within {timeout_ms} ms")
        reply = waiting.replies[0]
        if reply.error.code:
            raise ReplierError(reply.error.code, reply.error.message)
        return name, waiting.replies

    @contextlib.asynccontextmanager
    async def _response_stream(self, chosen: str, waiting: _Waiting) -> Any:
        """A response stream whose replies go to `waiting`, for the block; yields its
        name (`chosen`, or a generated one)."""
        try:
            if not chosen:
                await self._listen()
                token = secrets.token_hex(8)
                self._waiting[token] = waiting
                try:
                    yield f"reply-{self._id}{token}"
                finally:
                    del self._waiting[token]
                return
            async with self._reserved(chosen) as name:
                on_reply = functools.partial(_answer, waiting=waiting)
                sub = await self._bus.subscribe(reply_subject(name), cb=on_reply)
                try:
                    yield name
                finally:
                    self._drain(sub)
        finally:
            if not waiting.done.done():
                waiting.done.cancel()

    async def _listen(self) -> None:
        """Subscribe, once, to the replies of this gateway's generated response streams."""
        if self._inbox is not None:
            return
        async with self._inbox_lock:
            if self._inbox is None:
                subject = f"{REPLY_PREFIX}.g.{self._id}.*"
                self._inbox = await self._bus.subscribe(subject, cb=self._on_generated_reply)

    async def _on_generated_reply(self, msg: Msg) -> None:
        token = msg.subject.rsplit(".", 1)[-1]
        await _answer(msg, self._waiting.get(token))

    def _drain(self, sub: Subscription) -> None:
        """Remove a response stream's subscription in the background, answering "gone"
        to replies the bus already delivered to it (an unsubscribe would drop them
        unanswered, and their senders would wait for a timeout instead of NOT_FOUND)."""

        async def drain() -> None:
            with contextlib.suppress(Exception):
                await sub.drain()  # type: ignore[no-untyped-call]

        task = asyncio.create_task(drain(), name="response-stream-drain")
        self._draining.add(task)
        task.add_done_callback(self._draining.discard)

    async def in_use(self, name: str) -> bool:
        """Whether `name` is a response stream reserved by a waiting request (chosen
        names only: generated ones are known by their form)."""
        return await self._etcd.get(f"{RESPONSES_PREFIX}{name}".encode()) is not None

    async def reply(self, reply: gateway_pb2.ReplyRequest) -> None:
        """Deliver `reply` to the requester waiting on its response stream."""
        response_stream = reply.response_stream
        check_name("response stream", response_stream)
        generated = GENERATED.fullmatch(response_stream)
        if generated and generated[1] == self._id:
            # The requester waits at this gateway: no bus round trip, nothing encoded.
            waiting = self._waiting.get(generated[2])
            if waiting is None or not waiting.offer(reply):
                raise _expired(response_stream)
            return
        # Between gateways a reply stays a batch: any gateway version reads it.
        batch = as_batch(reply.message) if reply.HasField("message") else reply.batch
        body = gateway_pb2.ReplyRequest(
            response_stream=response_stream, batch=batch, error=reply.error
        )
        try:
            answer = await self._bus.request(
                reply_subject(response_stream), body.SerializeToString(), timeout=5
            )
        except NoRespondersError:
            answer = None
        except NatsTimeout:
            raise Unavailable(
                f"the requester of response stream {response_stream!r} did not answer"
            ) from None
        if answer is None or answer.data != _TAKEN:
            raise _expired(response_stream)

    @contextlib.asynccontextmanager
    async def _reserved(self, name: str) -> Any:
        """A chosen response stream name, unique in the cluster while the block runs."""
        check_name("response stream", name)
        if GENERATED.fullmatch(name):
            raise InvalidArgument(
                f"response stream {name!r} has the form of a generated name (reply-<32 hex>): "
                "leave it empty to get one, or choose another"
            )
        if await self._etcd.get(stream_key(name)) is not None:
            raise AlreadyExists(f"{name!r} names a stream; a response stream needs its own name")
        async with self._leasing:
            if not self._leased:
                await self._lease.__aenter__()
                self._leased = True
        key = f"{RESPONSES_PREFIX}{name}".encode()
        tx = self._etcd.transactions
        created, _ = await self._etcd.transaction(
            compare=[tx.version(key) == 0],
            success=[tx.put(key, b"", lease=self._lease.lease)],
            failure=[],
        )
        if not created:
            raise AlreadyExists(f"response stream {name!r} is already in use")
        try:
            yield name
        finally:
            with contextlib.suppress(Exception):
                await self._etcd.delete(key)


def _expired(response_stream: str) -> NotFound:
    return NotFound(
        f"response stream {response_stream!r} does not exist or has expired "
        "(it takes one reply, until its request times out)"
    )


async def _answer(msg: Msg, waiting: _Waiting | None) -> None:
    """Give `waiting` the reply `msg` carries (an encoded `ReplyRequest`), if it takes
    one, and tell the replier whether it was taken."""
    answer = _GONE
    if waiting is not None and waiting.offer(gateway_pb2.ReplyRequest.FromString(msg.data)):
        answer = _TAKEN
    with contextlib.suppress(Exception):
        await msg.respond(answer)
