"""The router's consume mux: one gateway's sessions on one stream.

`ConsumeMux` dispatches each request of the stream to its session and must
never wait on one: a session stuck (attaching, applying) or failing stalls and
ends only itself. These tests drive it with requests as the gateway sends them,
over in-memory subscriptions (`test_subscription`'s log and storage).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from test_subscription import MemoryLog, batch, memory_storage

from tamto_protocol.delivery_wire import MuxResponse, parse_consume_response, parse_mux_response
from tamto_protocol.v1 import messages_pb2, router_pb2
from tamto_router import consume_mux
from tamto_router.acks import AckSet
from tamto_router.consume import SubscribeSpec
from tamto_router.dead_letters import Policy
from tamto_router.grpc_api import consume_mux as router_consume_mux
from tamto_router.grpc_api import read_mux
from tamto_router.subscription import Subscription


class Registry:
    """The registry a `ConsumeSession` uses: stream "s" has one shared subscription on
    partition 0; attaching to stream "stuck" waits for `unstick`."""

    def __init__(self) -> None:
        log: Any = MemoryLog([batch(0, 2), batch(2, 2), batch(4, 2)])
        self.subscription = Subscription(log, "sub", AckSet(0), Policy(ack_timeout_s=30.0), 1000)
        self.unstick = asyncio.Event()
        self.addresses: dict[int, str] = {}

    async def get(self, spec: SubscribeSpec, partition: int) -> Subscription:
        if spec.stream == "stuck":
            await self.unstick.wait()
        return self.subscription


class Gateway:
    """Sends a mux's requests and reads its responses, as a gateway would."""

    def __init__(self, registry: Registry) -> None:
        self.mux = router_consume_mux(registry)  # type: ignore[arg-type]
        self._requests: asyncio.Queue[router_pb2.ConsumeMuxRequest | None] = asyncio.Queue()
        self.reader = asyncio.create_task(read_mux(self._stream(), self.mux))

    async def _stream(self) -> AsyncIterator[router_pb2.ConsumeMuxRequests]:
        while (request := await self._requests.get()) is not None:
            batch = [request]  # what is queued goes in one message, as from a gateway
            while not self._requests.empty() and (queued := self._requests.get_nowait()):
                batch.append(queued)
            yield router_pb2.ConsumeMuxRequests(requests=batch)

    def send(self, session: int, **request: Any) -> None:
        self._requests.put_nowait(
            router_pb2.ConsumeMuxRequest(
                session=session, consume=messages_pb2.ConsumeRequest(**request)
            )
        )

    def subscribe(
        self,
        session: int,
        stream: str = "s",
        kind: messages_pb2.SubscriptionType = messages_pb2.SUBSCRIPTION_TYPE_SHARED,
    ) -> None:
        subscribe = messages_pb2.Subscribe(
            stream=stream, subscription="sub", partitions=[0], type=kind
        )
        self.send(session, subscribe=subscribe)

    def credit(self, session: int, messages: int) -> None:
        self.send(session, credit=messages_pb2.Credit(messages=messages))

    def end(self, session: int) -> None:
        self._requests.put_nowait(router_pb2.ConsumeMuxRequest(session=session, end=True))

    def cancel(self, session: int) -> None:
        self._requests.put_nowait(router_pb2.ConsumeMuxRequest(session=session, cancel=True))

    def half_close(self) -> None:
        self._requests.put_nowait(None)

    async def response(self) -> MuxResponse:
        data = await asyncio.wait_for(self.mux.out.get(), 10)
        assert data is not None, "the mux ended"
        return parse_mux_response(data)

    async def close(self) -> None:
        self.reader.cancel()
        await self.mux.abandon_all()


def delivered(response: MuxResponse) -> list[int]:
    assert response.consume is not None, f"not a delivery: {response}"
    delivery = parse_consume_response(response.consume)
    assert delivery is not None
    first = delivery.batch.base_offset
    return list(range(first, first + delivery.batch.count))


async def test_a_session_stuck_attaching_does_not_stall_another() -> None:
    registry = Registry()
    gateway = Gateway(registry)
    gateway.subscribe(1, stream="stuck")
    for _ in range(50):  # requests for it queue in its inbox, not in the mux's reader
        gateway.credit(1, 1)
    gateway.subscribe(2)
    gateway.credit(2, 2)
    response = await gateway.response()
    assert response.session == 2
    assert delivered(response) == [0, 1]
    registry.unstick.set()
    await gateway.close()


async def test_a_sessions_error_ends_only_that_session() -> None:
    gateway = Gateway(Registry())
    gateway.subscribe(1)
    gateway.subscribe(2)
    gateway.send(
        1,
        ack=messages_pb2.PartitionAcks(
            partition=7, ranges=[messages_pb2.OffsetRange(first=0, last=0)]
        ),
    )
    end = await gateway.response()
    assert end.session == 1
    assert end.end is not None
    assert end.end[0] == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "partition 7 is not part of this session" in end.end[1]
    gateway.credit(1, 10)  # in flight for the ended session: ignored, not a new session
    gateway.credit(2, 2)
    response = await gateway.response()
    assert (response.session, delivered(response)) == (2, [0, 1])
    assert gateway.mux.sessions == 1
    await gateway.close()


async def test_a_cancelled_session_is_detached_and_its_unacked_messages_redelivered() -> None:
    gateway = Gateway(Registry())
    gateway.subscribe(1)
    gateway.credit(1, 2)
    first = await gateway.response()
    assert (first.session, delivered(first)) == (1, [0, 1])
    gateway.cancel(1)
    gateway.subscribe(2)
    gateway.credit(2, 2)
    again = await gateway.response()
    assert (again.session, delivered(again)) == (2, [0, 1]), "redelivered to the other session"
    assert again.consume is not None
    delivery = parse_consume_response(again.consume)
    assert delivery is not None
    assert delivery.delivery_count == 2
    await gateway.close()


async def test_an_ended_session_applies_its_acks_and_ends_cleanly() -> None:
    registry = Registry()
    gateway = Gateway(registry)
    gateway.subscribe(1)
    gateway.credit(1, 2)
    assert delivered(await gateway.response()) == [0, 1]
    gateway.send(
        1,
        ack=messages_pb2.PartitionAcks(
            partition=0, ranges=[messages_pb2.OffsetRange(first=0, last=1)]
        ),
    )
    gateway.end(1)
    end = await gateway.response()
    assert (end.session, end.end) == (1, (0, ""))
    assert memory_storage(registry.subscription).commits[-1][0] == 2, "its acks were committed"
    gateway.half_close()
    assert await asyncio.wait_for(gateway.mux.out.get(), 10) is None, "the stream ends"
    await gateway.close()


async def test_a_session_queueing_too_many_requests_fails_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(consume_mux, "MUX_SESSION_QUEUE", 5)
    registry = Registry()
    gateway = Gateway(registry)
    gateway.subscribe(1, stream="stuck")  # applies nothing while attaching
    for _ in range(6):
        gateway.credit(1, 1)
    end = await gateway.response()
    assert end.session == 1
    assert end.end is not None
    assert end.end[0] == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert "more than 5 requests" in end.end[1]
    gateway.subscribe(2)
    gateway.credit(2, 2)
    response = await gateway.response()
    assert (response.session, delivered(response)) == (2, [0, 1])
    registry.unstick.set()
    await gateway.close()


async def test_a_session_cancelled_in_the_message_that_opens_its_successor_makes_room() -> None:
    """A killed consumer's cancel and its successor's subscribe may come in one
    message: the exclusive subscription must be free by the time the successor
    attaches (found as FAILED_PRECONDITION "already has a consumer (exclusive)")."""
    gateway = Gateway(Registry())
    exclusive = messages_pb2.SUBSCRIPTION_TYPE_EXCLUSIVE
    gateway.subscribe(1, kind=exclusive)
    gateway.credit(1, 2)
    assert delivered(await gateway.response()) == [0, 1]
    gateway.cancel(1)
    gateway.subscribe(2, kind=exclusive)
    gateway.credit(2, 2)
    again = await gateway.response()
    assert again.end is None, f"the successor was refused: {again.end}"
    assert (again.session, delivered(again)) == (2, [0, 1])
    await gateway.close()


async def test_queued_responses_go_in_one_message_up_to_the_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(consume_mux, "MUX_BATCH_BYTES", 5)
    gateway = Gateway(Registry())
    for response in (b"ab", b"cd", b"ef", b"g", None):
        gateway.mux.out.put_nowait(response)
    batches = [batch async for batch in gateway.mux.batches()]
    assert batches == [[b"ab", b"cd", b"ef"], [b"g"]], "the cap reached, then the stream's end"
    await gateway.close()
