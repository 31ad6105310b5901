"""An in-process fake of the Gateway service for the SDK's unit tests.

It is a real `grpc.aio` server (the SDK talks to it over a real channel) with an
in-memory log per partition, bearer-token checks, credit-based Consume (with
immediate redelivery of nacks without delay, and delivery counts) and fault
injection. It only implements what the SDK's tests need.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import pyarrow as pa

from tamto_protocol.batch import BATCH_SCHEMA, BatchFormatError, decode_batch, validate_batch
from tamto_protocol.v1 import gateway_pb2, gateway_pb2_grpc, messages_pb2
from tamto_sdk import ClientOptions

API_KEY = "test-key"

#: Client options for tests: short backoffs and deadlines, and the gateway path (the
#: fake is a gateway with no routers behind it, and it stores batches in the order they
#: come: the router's hold of a producer's early batch is tested in the router's tests).
FAST = ClientOptions(
    direct=False,
    retry_deadline_s=5.0,
    retry_initial_backoff_s=0.01,
    retry_max_backoff_s=0.05,
    rpc_timeout_s=5.0,
    ack_linger_s=0.005,
)


class _Refused(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class _CallContext:
    """A pipelined stream's context as one of its calls sees it: abort refuses the call."""

    def __init__(self, context: grpc.aio.ServicerContext) -> None:
        self._context = context

    def invocation_metadata(self) -> Any:
        return self._context.invocation_metadata()

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise _Refused(code, details)


@dataclass
class StoredBatch:
    base_offset: int
    count: int
    publish_time_us: int
    arrow_ipc: bytes


@dataclass
class Subscription:
    start: dict[int, int]
    ack_requests: list[tuple[int, list[tuple[int, int]]]] = field(default_factory=list)
    acked: dict[int, set[int]] = field(default_factory=dict)
    # (partition, ranges, delay_ms) per nack request.
    nack_requests: list[tuple[int, list[tuple[int, int]], int]] = field(default_factory=list)
    deliveries: dict[tuple[int, int], int] = field(default_factory=dict)  # (p, offset) -> count


@dataclass
class Session:
    subscription: str
    type: int = 0  # messages_pb2.SubscriptionType as sent
    consumer_name: str = ""
    consumer_id: str = ""
    start: Any = None  # the StartPosition as sent
    granted: int = 0
    credit: int = 0
    delivered: int = 0
    max_outstanding: int = 0
    drop: bool = False
    ended: bool = False
    redeliver: deque[tuple[int, int]] = field(default_factory=deque)  # (partition, offset)


def slice_ipc(data: bytes, start: int, length: int) -> bytes:
    """Re-encode rows [start, start+length) of an IPC batch (the fake slices this way)."""
    batch = decode_batch(data).slice(start, length)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, BATCH_SCHEMA) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def first_unacked(sub: Subscription) -> dict[int, int]:
    """partition → the first offset from the subscription's start not acked yet (where a
    new session redelivers from)."""
    cursors: dict[int, int] = {}
    for p, start in sub.start.items():
        cursor = start
        while cursor in sub.acked.get(p, set()):
            cursor += 1
        cursors[p] = cursor
    return cursors


class FakeGateway(gateway_pb2_grpc.GatewayServicer):
    def __init__(self) -> None:
        self.url = ""
        self.token_ttl_s = 3600.0
        self._token_ids = itertools.count(1)
        self.valid_tokens: set[str] = set()
        self.auth_calls = 0
        self.authorizations: list[tuple[str, str]] = []  # (method, authorization)
        self.streams: dict[str, int] = {}
        self.configs: dict[str, Any] = {}  # name -> StreamConfig as last ensured
        self.ensure_requests: list[Any] = []
        self.logs: dict[tuple[str, int], list[StoredBatch]] = {}
        self.publish_requests: list[Any] = []
        self.publish_failures: deque[grpc.StatusCode] = deque()
        self.publish_gate: asyncio.Event | None = None
        self.subscriptions: dict[tuple[str, str], Subscription] = {}
        self.sessions: list[Session] = []
        # When set, every Delivery carries this delivery_count instead of the real one.
        self.delivery_count: int | None = None
        self.changed = asyncio.Condition()

    # -- helpers for tests ----------------------------------------------------

    async def wait_for(self, predicate: Callable[[], bool], deadline_s: float = 5.0) -> None:
        """Wait until `predicate()` holds (re-checked on every state change)."""
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(predicate), deadline_s)

    async def notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    def revoke_tokens(self) -> None:
        self.valid_tokens.clear()

    async def drop_sessions(self) -> None:
        for session in self.sessions:
            session.drop = True
        await self.notify()

    def end_offset(self, stream: str, partition: int) -> int:
        log = self.logs.get((stream, partition), [])
        return log[-1].base_offset + log[-1].count if log else 0

    def rows(self, stream: str, partition: int) -> list[dict[str, Any]]:
        """Every stored message of a partition, decoded, with its offset."""
        out: list[dict[str, Any]] = []
        for stored in self.logs.get((stream, partition), []):
            for i, row in enumerate(decode_batch(stored.arrow_ipc).to_pylist()):
                out.append({"offset": stored.base_offset + i, **row})
        return out

    def acked(self, stream: str, subscription: str, partition: int) -> set[int]:
        sub = self.subscriptions.get((stream, subscription))
        return set() if sub is None else sub.acked.get(partition, set())

    def add_stream(self, name: str, partitions: int, config: Any = None) -> None:
        self.streams[name] = partitions
        stored = messages_pb2.StreamConfig()
        if config is not None:
            stored.CopyFrom(config)
        stored.kind = messages_pb2.STREAM_KIND_PERSISTENT
        stored.partitions = partitions
        self.configs[name] = stored
        for p in range(partitions):
            self.logs.setdefault((name, p), [])

    # -- gateway --------------------------------------------------------------

    async def _check_auth(self, context: grpc.aio.ServicerContext, method: str) -> None:
        metadata = dict(context.invocation_metadata() or ())
        authorization = str(metadata.get("authorization", ""))
        self.authorizations.append((method, authorization))
        token = authorization.removeprefix("Bearer ")
        if not authorization.startswith("Bearer ") or token not in self.valid_tokens:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad or missing token")

    def _info(self, name: str) -> Any:
        return messages_pb2.StreamInfo(name=name, config=self.configs[name])

    async def Authenticate(
        self, request: gateway_pb2.AuthenticateRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        self.auth_calls += 1
        if request.api_key != API_KEY:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "unknown API key")
        token = f"token-{next(self._token_ids)}"
        self.valid_tokens.add(token)
        await self.notify()
        return gateway_pb2.AuthenticateResponse(
            token=token, expires_at_unix=int(time.time() + self.token_ttl_s)
        )

    async def EnsureStream(
        self, request: gateway_pb2.EnsureStreamRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        await self._check_auth(context, "EnsureStream")
        self.ensure_requests.append(request)
        if request.name not in self.streams:
            self.add_stream(request.name, request.config.partitions, request.config)
            return gateway_pb2.EnsureStreamResponse(stream=self._info(request.name), created=True)
        stored = self.configs[request.name]
        differences = [
            f"{f.name}: stored {getattr(stored, f.name)}, requested {getattr(request.config, f.name)}"
            for f in messages_pb2.StreamConfig.DESCRIPTOR.fields
            if f.name != "kind" and getattr(stored, f.name) != getattr(request.config, f.name)
        ]
        if differences and request.overwrite:
            if request.config.partitions != stored.partitions:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "partitions are fixed")
            self.add_stream(request.name, request.config.partitions, request.config)
        return gateway_pb2.EnsureStreamResponse(
            stream=self._info(request.name), created=False, differences=differences
        )

    async def DescribeStream(
        self, request: gateway_pb2.DescribeStreamRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        await self._check_auth(context, "DescribeStream")
        if request.name not in self.streams:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no stream {request.name!r}")
        return self._info(request.name)

    async def ListStreams(
        self, request: gateway_pb2.ListStreamsRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        await self._check_auth(context, "ListStreams")
        return gateway_pb2.ListStreamsResponse(
            streams=[self._info(n) for n in sorted(self.streams)]
        )

    async def DeleteStream(
        self, request: gateway_pb2.DeleteStreamRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        await self._check_auth(context, "DeleteStream")
        deleted = self.streams.pop(request.name, None) is not None
        self.configs.pop(request.name, None)
        return gateway_pb2.DeleteStreamResponse(deleted=deleted)

    async def Publish(
        self, request: gateway_pb2.PublishRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        await self._check_auth(context, "Publish")
        self.publish_requests.append(request)
        await self.notify()
        if self.publish_failures:
            await context.abort(self.publish_failures.popleft(), "injected failure")
        if self.publish_gate is not None:
            await self.publish_gate.wait()
        if request.stream not in self.streams:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no such stream")
        if request.partition >= self.streams[request.stream]:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no such partition")
        try:
            validate_batch(request.batch.arrow_ipc, request.batch.count, 0)
        except BatchFormatError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        base = self.end_offset(request.stream, request.partition)
        self.logs[(request.stream, request.partition)].append(
            StoredBatch(base, request.batch.count, int(time.time() * 1e6), request.batch.arrow_ipc)
        )
        await self.notify()
        return gateway_pb2.PublishResponse(
            partition=request.partition, base_offset=base, count=request.batch.count
        )

    async def PublishStream(
        self,
        request_iterator: AsyncIterator[gateway_pb2.PublishRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[gateway_pb2.PublishStreamResponse]:
        """Each request is one `Publish`, run as its own task; its abort refuses only it."""
        answers: asyncio.Queue[Any] = asyncio.Queue()

        async def one(request: gateway_pb2.PublishRequest) -> None:
            answer = gateway_pb2.PublishStreamResponse(call_id=request.call_id)
            try:
                answer.response.CopyFrom(await self.Publish(request, _CallContext(context)))
            except _Refused as refused:
                answer.status.code = refused.code.value[0]
                answer.status.message = refused.details
            answers.put_nowait(answer)

        async def read() -> None:
            async with asyncio.TaskGroup() as calls:
                async for request in request_iterator:
                    calls.create_task(one(request))
            answers.put_nowait(None)

        reader = asyncio.create_task(read())
        try:
            while (answer := await answers.get()) is not None:
                yield answer
        finally:
            reader.cancel()

    async def Consume(  # type: ignore[override]  # answers through context.write
        self,
        request_iterator: AsyncIterator[messages_pb2.ConsumeRequest],
        context: grpc.aio.ServicerContext,
    ) -> None:
        await self._check_auth(context, "Consume")
        first = await context.read()
        if first is grpc.aio.EOF or not first.HasField("subscribe"):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "subscribe first")
        subscribe = first.subscribe
        stream = subscribe.stream
        if stream not in self.streams:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no such stream")
        sub = self._subscription(subscribe)
        cursors = first_unacked(sub)
        session = Session(
            subscription=subscribe.subscription,
            type=subscribe.type,
            consumer_name=subscribe.consumer_name,
            consumer_id=subscribe.consumer_id,
            start=subscribe.start,
        )
        self.sessions.append(session)
        await self.notify()
        reader = asyncio.create_task(self._read_requests(context, session, sub))

        def ready() -> bool:
            if session.drop or session.ended:
                return True
            return session.credit > 0 and (
                bool(session.redeliver)
                or any(cursors[p] < self.end_offset(stream, p) for p in cursors)
            )

        try:
            while True:
                async with self.changed:
                    await self.changed.wait_for(ready)
                if session.drop:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "dropped by the test")
                if session.ended:
                    return
                delivery = self._next_delivery(stream, session, sub, cursors)
                if delivery is None:
                    continue
                await context.write(messages_pb2.ConsumeResponse(delivery=delivery))
                await self.notify()
        finally:
            session.ended = True
            reader.cancel()
            await self.notify()

    def _subscription(self, subscribe: Any) -> Subscription:
        """The subscription `subscribe` names, made at its start position if it is new."""
        key = (subscribe.stream, subscribe.subscription)
        sub = self.subscriptions.get(key)
        if sub is None:
            starts = {
                p: self._start_offset(subscribe.stream, p, subscribe.start)
                for p in range(self.streams[subscribe.stream])
            }
            sub = self.subscriptions[key] = Subscription(start=starts)
        return sub

    def _start_offset(self, stream: str, partition: int, start: Any) -> int:
        """Where a new subscription starts reading a partition, from its StartPosition."""
        position = start.WhichOneof("position")
        if position == "latest":
            return self.end_offset(stream, partition)
        if position == "offset":
            return int(start.offset)
        if position == "time_us":
            return next(
                (
                    b.base_offset
                    for b in self.logs[(stream, partition)]
                    if b.publish_time_us >= start.time_us
                ),
                self.end_offset(stream, partition),
            )
        return 0

    def _next_delivery(
        self, stream: str, session: Session, sub: Subscription, cursors: dict[int, int]
    ) -> messages_pb2.Delivery | None:
        """The next delivery of a session with credit: nacked messages go first, one at a
        time (None for one acked since its nack), then the next messages of the first
        partition with any past its cursor."""
        redelivery = bool(session.redeliver)
        if redelivery:
            p, cursor = session.redeliver.popleft()
            if cursor in sub.acked.get(p, set()):
                return None
        else:
            for p, cursor in cursors.items():
                if cursor < self.end_offset(stream, p):
                    break
        stored = next(
            s for s in self.logs[(stream, p)] if s.base_offset <= cursor < s.base_offset + s.count
        )
        start = cursor - stored.base_offset
        count = 1 if redelivery else min(stored.count - start, session.credit)
        data = stored.arrow_ipc
        if start or count != stored.count:
            data = slice_ipc(data, start, count)
        session.credit -= count
        session.delivered += count
        if not redelivery:
            cursors[p] = cursor + count
        return messages_pb2.Delivery(
            stream=stream,
            partition=p,
            batch=messages_pb2.StoredBatch(
                base_offset=cursor,
                count=count,
                publish_time_us=stored.publish_time_us,
                arrow_ipc=data,
            ),
            delivery_count=self._count_deliveries(sub, p, cursor, count),
        )

    def _count_deliveries(self, sub: Subscription, partition: int, first: int, count: int) -> int:
        """Count one more delivery of offsets [first, first+count) of a partition; the
        highest count among them (or the count the test set)."""
        delivery_count = 0
        for offset in range(first, first + count):
            n = sub.deliveries[(partition, offset)] = sub.deliveries.get((partition, offset), 0) + 1
            delivery_count = max(delivery_count, n)
        return delivery_count if self.delivery_count is None else self.delivery_count

    async def _read_requests(
        self, context: grpc.aio.ServicerContext, session: Session, sub: Subscription
    ) -> None:
        while True:
            request = await context.read()
            if request is grpc.aio.EOF:
                session.ended = True
                await self.notify()
                return
            kind = request.WhichOneof("request")
            if kind == "credit":
                session.granted += request.credit.messages
                session.credit += request.credit.messages
                session.max_outstanding = max(
                    session.max_outstanding, session.granted - session.delivered
                )
            elif kind == "ack":
                ranges = [(r.first, r.last) for r in request.ack.ranges]
                sub.ack_requests.append((request.ack.partition, ranges))
                acked = sub.acked.setdefault(request.ack.partition, set())
                for first, last in ranges:
                    acked.update(range(first, last + 1))
            elif kind == "nack":
                nack = request.nack
                ranges = [(r.first, r.last) for r in nack.ranges]
                sub.nack_requests.append((nack.partition, ranges, nack.delay_ms))
                if nack.delay_ms == 0:  # delayed nacks are only recorded
                    for first, last in ranges:
                        session.redeliver.extend(
                            (nack.partition, o) for o in range(first, last + 1)
                        )
            await self.notify()
