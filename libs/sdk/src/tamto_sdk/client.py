"""The client: one channel to a gateway, authenticated, owning producers and consumers.

Producers, consumers and the ephemeral verbs move messages as Arrow batches; their
modules (and pyarrow with them) are imported when the first one is made, so a
client that only administers (`tamto sub describe`) starts without them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Coroutine, Generator, Mapping
from typing import TYPE_CHECKING, Any

import grpc

from tamto_protocol.keepalive import KEEPALIVE_OPTIONS
from tamto_protocol.reconnect import RECONNECT_OPTIONS
from tamto_protocol.v1 import gateway_pb2_grpc
from tamto_sdk._calls import Calls
from tamto_sdk._deprecated import renamed_argument
from tamto_sdk._lifecycle import AsyncClosing
from tamto_sdk.admin import Cluster, Streams
from tamto_sdk.auth import TokenAuth
from tamto_sdk.direct import DirectPublisher
from tamto_sdk.errors import Closed, Unavailable
from tamto_sdk.functions import Functions
from tamto_sdk.options import ClientOptions
from tamto_sdk.positions import Start, StartPosition, SubscriptionType
from tamto_sdk.security import Security
from tamto_sdk.subscriptions import Subscriptions
from tamto_sdk.url import parse_url, tls_mismatch

if TYPE_CHECKING:
    from tamto_sdk.consumer import Consumer
    from tamto_sdk.ephemeral_messages import EphemeralMessage
    from tamto_sdk.ephemeral_producer import EphemeralProducer
    from tamto_sdk.ephemeral_subscription import EphemeralSubscription
    from tamto_sdk.errors import TamtoError
    from tamto_sdk.producer import Producer
    from tamto_sdk.replies import Handler, ReplyHandler

__all__ = ["Client", "Connecting", "connect"]

_MAX_MESSAGE_BYTES = 64 * 1024 * 1024

#: The environment variable `connect` reads when `ClientOptions.direct` is None
#: (on unless "0", "false", "no" or "off"). The SDK reads no other.
DIRECT_ENV = "TAMTO_DIRECT"
_OFF = ("0", "false", "no", "off")


def connect(url: str, *, api_key: str, options: ClientOptions | None = None) -> Connecting:
    """Connect to a Tamto gateway and authenticate with `api_key`.

    `url` is ``tamto://host:port``, ``tamtos://host:port`` (TLS) or ``host:port``.
    Use it as ``async with connect(...) as client:`` (closed on leaving the block), or
    ``client = await connect(...)`` and close the client yourself. Raises
    `Unauthenticated` if the key is refused, `Unavailable` if the gateway cannot be
    reached within `ClientOptions.retry_deadline_s`. The environment is read here and
    nowhere else: ``TAMTO_DIRECT`` when `ClientOptions.direct` is None.
    """
    return Connecting(url, api_key, options)


class Connecting(Coroutine[Any, Any, "Client"]):
    """A connection being made: await it for the `Client`, or enter it as a context.

    It is the connecting coroutine itself (so `asyncio.create_task(connect(...))`
    works too), and an async context manager closing the client on exit, as
    aiohttp's request calls are."""

    def __init__(self, url: str, api_key: str, options: ClientOptions | None) -> None:
        self._coroutine = _connect(url, api_key, options)
        self._client: Client | None = None

    def send(self, value: Any) -> Any:
        return self._coroutine.send(value)

    def throw(self, *args: Any) -> Any:
        return self._coroutine.throw(*args)

    def close(self) -> None:
        self._coroutine.close()

    def __await__(self) -> Generator[Any, None, Client]:
        return self._coroutine.__await__()

    async def __aenter__(self) -> Client:
        self._client = await self._coroutine
        return self._client

    async def __aexit__(self, *exc_info: object) -> None:
        if self._client is not None:
            await self._client.close()


async def _connect(url: str, api_key: str, options: ClientOptions | None) -> Client:
    """Open the channel and authenticate (`connect`)."""
    options = _from_environment(options if options is not None else ClientOptions())
    endpoint = parse_url(url)
    # Batches of up to 32 MiB (`MAX_BATCH_BYTES`) travel both ways; the servers allow
    # 64 MiB per message. A gateway or router that stops answering (a network cut) is
    # noticed within about 2 s (`tamto_protocol.keepalive`), and one serving again is
    # dialled within 0.3 s (`tamto_protocol.reconnect`). An application's own setting
    # of these options wins.
    channel_options = list(options.channel_options)
    given = {name for name, _ in channel_options}
    defaults = [
        ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
        *KEEPALIVE_OPTIONS,
        *RECONNECT_OPTIONS,
    ]
    channel_options.extend((name, value) for name, value in defaults if name not in given)
    tls = endpoint.tls or options.tls

    def open_channel(target: str) -> grpc.aio.Channel:
        """A channel to the gateway, or to a router (the direct path), alike."""
        if tls:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=options.root_certificates,
                private_key=options.private_key,
                certificate_chain=options.certificate_chain,
            )
            return grpc.aio.secure_channel(target, credentials, options=channel_options)
        return grpc.aio.insecure_channel(target, options=channel_options)

    channel = open_channel(endpoint.target)
    client = Client(channel, api_key=api_key, options=options)
    if options.direct:
        client._calls.direct = DirectPublisher(client._calls, open_channel)
    try:
        try:
            await client._auth.authenticate_once()
        except Unavailable:
            # A TLS/plaintext mismatch looks like "socket closed" to gRPC: say what it is.
            mismatch = await tls_mismatch(endpoint, tls)
            if mismatch is not None:
                raise Unavailable(mismatch, code="UNAVAILABLE", retriable=False) from None
            await client._auth.authenticate()
    except BaseException:
        await client.close()
        raise
    return client


def _from_environment(options: ClientOptions) -> ClientOptions:
    """`options` with what they leave to the environment filled in (`DIRECT_ENV`)."""
    if options.direct is None:
        direct = os.environ.get(DIRECT_ENV, "1").strip().lower() not in _OFF
        options = dataclasses.replace(options, direct=direct)
    return options


class Client(AsyncClosing):
    """A connection to Tamto; create it with `connect`.

    Use as an async context manager; `close` closes every producer (flushing
    them) and consumer created from it, then the channel.
    """

    def __init__(self, channel: grpc.aio.Channel, *, api_key: str, options: ClientOptions) -> None:
        self._channel = channel
        self._options = options
        stub = gateway_pb2_grpc.GatewayStub(channel)
        self._auth = TokenAuth(stub, api_key, options)
        self._calls = Calls(stub, self._auth, options, channel)
        self._streams = Streams(self._calls)
        self._cluster = Cluster(self._calls)
        self._security = Security(self._calls)
        self._subscriptions = Subscriptions(self._calls)
        self._functions = Functions(self._calls)
        self._producers: list[Producer] = []
        self._consumers: list[Consumer] = []
        self._ephemeral: list[EphemeralProducer | EphemeralSubscription | ReplyHandler] = []
        self._closed = False

    @property
    def options(self) -> ClientOptions:
        """The options this client was created with."""
        return self._options

    @property
    def streams(self) -> Streams:
        """Stream administration: ensure, describe, list."""
        return self._streams

    @property
    def cluster(self) -> Cluster:
        """Cluster placement: move a partition, drain or undrain a router."""
        return self._cluster

    @property
    def subscriptions(self) -> Subscriptions:
        """Subscription administration: list, describe, seek, skip, delete."""
        return self._subscriptions

    @property
    def functions(self) -> Functions:
        """Processing functions: deploy, update, pause, resume, delete, list, status."""
        return self._functions

    @property
    def security(self) -> Security:
        """Security administration: identities, keys, roles, bindings; and `whoami`."""
        return self._security

    def producer(
        self,
        stream: str,
        *,
        linger_s: float = 0,
        max_batch_messages: int = 1000,
        max_batch_bytes: int = 4 << 20,
        max_pending_messages: int = 100_000,
        idempotent: bool = True,
        max_in_flight: int = 1,
        linger_ms: float | None = None,
    ) -> Producer:
        """A producer for `stream`; use it as an async context manager.

        A batch goes `linger_s` seconds after its first message at the latest
        (0: as soon as its partition has room for another of its `max_in_flight`
        batches in flight). `linger_ms` is the
        deprecated name of `linger_s`, in milliseconds.
        """
        from tamto_sdk.producer import Producer

        self._check_open()
        if linger_ms is not None:
            linger_ms /= 1000  # the old argument counted milliseconds
        linger_s = renamed_argument("producer", "linger_ms", linger_ms, "linger_s", linger_s, 0)
        producer = Producer(
            self._calls,
            self._streams,
            stream,
            linger_s=linger_s,
            max_batch_messages=max_batch_messages,
            max_batch_bytes=max_batch_bytes,
            max_pending_messages=max_pending_messages,
            producer_name=self._options.producer_name,
            idempotent=idempotent,
            max_in_flight=max_in_flight,
        )
        self._producers.append(producer)
        return producer

    def consumer(
        self,
        stream: str,
        subscription: str,
        *,
        subscription_type: SubscriptionType = SubscriptionType.EXCLUSIVE,
        start: StartPosition | None = None,
        credits: int | None = None,
        consumer_name: str | None = None,
        type: SubscriptionType | None = None,
    ) -> Consumer:
        """A consumer of `subscription` on `stream`; use it as an async context manager.

        `subscription_type` says how the subscription's consumers share its messages
        (exclusive, failover, shared, key-shared or multicast; see
        `SubscriptionType`). `start` (default `Start.earliest()`) applies when the
        subscription is created. At most `credits` messages are buffered or in
        flight per router that owns some of the stream's partitions (each gets the
        whole grant, `Consumer`); without it the window starts at 1,000 and grows
        while the application waits on credit (`tamto_sdk.credit_window`).
        `consumer_name` shows in server logs and orders failover consumers. `type`
        is the deprecated name of `subscription_type`.
        """
        from tamto_sdk.consumer import Consumer

        self._check_open()
        subscription_type = renamed_argument(
            "consumer",
            "type",
            type,
            "subscription_type",
            subscription_type,
            SubscriptionType.EXCLUSIVE,
        )
        consumer = Consumer(
            self._calls,
            stream,
            subscription,
            subscription_type=subscription_type,
            start=start if start is not None else Start.earliest(),
            credits=credits,
            consumer_name=consumer_name,
        )
        self._consumers.append(consumer)
        return consumer

    def ephemeral_producer(
        self, stream: str, *, max_batch_messages: int = 1000, max_pending: int = 100_000
    ) -> EphemeralProducer:
        """A producer for ephemeral stream `stream`: `await producer.send(payload,
        topic="a.b")`; use it as an async context manager (docs/ephemeral.md)."""
        from tamto_sdk.ephemeral_producer import EphemeralProducer

        self._check_open()
        producer = EphemeralProducer(
            self._calls, stream, max_batch_messages=max_batch_messages, max_pending=max_pending
        )
        self._ephemeral.append(producer)
        return producer

    def subscribe(
        self,
        stream: str,
        *,
        match: str | None = None,
        group: str = "",
        consumer_name: str = "",
    ) -> EphemeralSubscription:
        """Receive what ephemeral stream `stream` gets from now on, at most once.

        `match` is a RabbitMQ topic pattern (`*` one word, `#` zero or more; None:
        everything). With a `group`, the live consumers of the same group share the
        messages as a queue whose bindings are their patterns: each message any of
        them matches goes to one of them whose pattern matches it, once however many
        match. Without, this consumer gets every match. Use it as an async context
        manager and async iterator.
        """
        from tamto_sdk.ephemeral_subscription import EphemeralSubscription

        self._check_open()
        subscription = EphemeralSubscription(
            self._calls, stream, match=match, group=group, consumer_name=consumer_name
        )
        self._ephemeral.append(subscription)
        return subscription

    async def request(
        self,
        stream: str,
        payload: bytes,
        *,
        topic: str = "",
        timeout_s: float | None = None,
        response_stream: str = "",
        key: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        wait_for_responder: bool = False,
    ) -> EphemeralMessage:
        """Publish a request to ephemeral stream `stream` and return its reply message
        (payload, key, headers).

        The server makes the response stream (`response_stream`, or a unique name)
        and waits `timeout_s` (None: the stream's `request_timeout_ms`) for a
        reply; without one it raises `Timeout`. The client sets no deadline itself.
        When nobody in the cluster consumes `topic` it raises `NoResponders` at once,
        unless `wait_for_responder` (then it waits for a reply as long as without).
        A replier that answered with an error raises that error (`InvalidArgument`,
        ...). A taken `response_stream` raises `AlreadyExists`. (Iterating the reply,
        as when this returned a batch, still works but is deprecated.)
        """
        from tamto_sdk import replies

        self._check_open()
        ask = replies.Ask(stream, payload, topic, timeout_s, key, headers, wait_for_responder)
        return await replies.request(self._calls, ask, response_stream)

    async def gather(
        self,
        stream: str,
        payload: bytes,
        *,
        topic: str = "",
        timeout_s: float | None = None,
        max_replies: int = 0,
        key: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        wait_for_responder: bool = False,
    ) -> list[EphemeralMessage | TamtoError]:
        """Scatter-gather: publish a request and return every reply that came within
        `timeout_s` (None: the stream's `request_timeout_ms`), in the order they came,
        or once `max_replies` came (0: no limit). A replier's error is in the list as
        its `TamtoError`. No reply in time is an empty list, not `Timeout`; nobody
        consuming `topic` raises `NoResponders` unless `wait_for_responder`.
        """
        from tamto_sdk import replies

        self._check_open()
        ask = replies.Ask(stream, payload, topic, timeout_s, key, headers, wait_for_responder)
        return await replies.gather(self._calls, ask, max_replies)

    async def reply(
        self,
        response_stream: str,
        payload: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Answer a request; `NotFound` if its response stream is gone (answered,
        timed out, or never made)."""
        from tamto_sdk import replies

        self._check_open()
        await replies.reply(self._calls, response_stream, payload, key, headers)

    async def reply_error(self, response_stream: str, error: BaseException) -> None:
        """Answer a request with an error status: a `TamtoError`'s own code and
        message, UNKNOWN naming any other exception; the requester raises it.
        `NotFound` as for `reply`."""
        from tamto_sdk import replies

        self._check_open()
        await replies.reply_error(self._calls, response_stream, error)

    def reply_handler(
        self,
        stream: str,
        handler: Handler,
        *,
        match: str | None = None,
        group: str = "",
        concurrency: int = 16,
    ) -> ReplyHandler:
        """Answer the requests `stream` receives (see `subscribe` for `match` and
        `group`) with what `handler(message)` returns (bytes, a `Reply` or a
        message; an error status if it raises), up to `concurrency` at once; use
        it as an async context manager."""
        from tamto_sdk.ephemeral_subscription import EphemeralSubscription
        from tamto_sdk.replies import ReplyHandler

        self._check_open()
        # Its requests come as single messages where sent as such: no Arrow to decode.
        subscription = EphemeralSubscription(
            self._calls, stream, match=match, group=group, consumer_name="", single_messages=True
        )
        self._ephemeral.append(subscription)
        handler_ = ReplyHandler(self._calls, subscription, handler, concurrency)
        self._ephemeral.append(handler_)
        return handler_

    def _check_open(self) -> None:
        if self._closed:
            raise Closed("client is closed")

    async def close(self) -> None:
        """Close producers (flushing them), consumers, then the channel. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await asyncio.gather(
            *(p.close() for p in self._producers),
            *(c.close() for c in self._consumers),
            *(e.close() for e in self._ephemeral),
            return_exceptions=True,
        )
        self._ephemeral.clear()
        self._producers.clear()
        self._consumers.clear()
        await self._calls.close()
        await self._channel.close()
