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
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import secrets
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
from tamto_protocol.v1 import gateway_pb2, messages_pb2

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
        self._waiting: dict[str, asyncio.Future[messages_pb2.RecordBatch]] = {}
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
        response_stream: str,
        timeout_ms: int,
    ) -> tuple[str, messages_pb2.RecordBatch]:
        """Publish a request and wait for its reply; returns the response stream's name
        and the reply's batch. Raises `RequestTimeout` when no reply came in time."""
        timeout_ms = check_timeout_ms(timeout_ms) or stream.request_timeout_ms
        reply: asyncio.Future[messages_pb2.RecordBatch] = asyncio.get_running_loop().create_future()
        async with self._response_stream(response_stream, reply) as name:
            await self._hub.publish(stream, topic, arrow_ipc, count, response_stream=name)
            try:
                batch = await asyncio.wait_for(reply, timeout_ms / 1000)
            except TimeoutError:
                raise RequestTimeout(
                    f"no reply on response stream {name!r} within {timeout_ms} ms"
                ) from None
        return name, batch

    @contextlib.asynccontextmanager
    async def _response_stream(
        self, chosen: str, reply: asyncio.Future[messages_pb2.RecordBatch]
    ) -> Any:
        """A response stream whose first reply completes `reply`, for the block;
        yields its name (`chosen`, or a generated one)."""
        try:
            if not chosen:
                await self._listen()
                token = secrets.token_hex(8)
                self._waiting[token] = reply
                try:
                    yield f"reply-{self._id}{token}"
                finally:
                    del self._waiting[token]
                return
            async with self._reserved(chosen) as name:
                on_reply = functools.partial(_answer, reply=reply)
                sub = await self._bus.subscribe(reply_subject(name), cb=on_reply)
                try:
                    yield name
                finally:
                    self._drain(sub)
        finally:
            if not reply.done():
                reply.cancel()

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

    async def reply(self, response_stream: str, batch: messages_pb2.RecordBatch) -> None:
        """Deliver a reply to the requester waiting on `response_stream`."""
        check_name("response stream", response_stream)
        generated = GENERATED.fullmatch(response_stream)
        if generated and generated[1] == self._id:
            # The requester waits at this gateway: no bus round trip, nothing encoded.
            waiting = self._waiting.get(generated[2])
            if waiting is None or waiting.done():
                raise _expired(response_stream)
            waiting.set_result(batch)
            return
        body = gateway_pb2.ReplyRequest(response_stream=response_stream, batch=batch)
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


async def _answer(msg: Msg, reply: asyncio.Future[messages_pb2.RecordBatch] | None) -> None:
    """Complete `reply` with the batch of the reply `msg` carries (an encoded
    `ReplyRequest`), if it waits, and tell the replier whether it was taken."""
    answer = _GONE
    if reply is not None and not reply.done():
        reply.set_result(gateway_pb2.ReplyRequest.FromString(msg.data).batch)
        answer = _TAKEN
    with contextlib.suppress(Exception):
        await msg.respond(answer)
