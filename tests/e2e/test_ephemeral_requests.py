"""Request/reply as NATS users expect it, on a real cluster with two gateways.

Requests go through the first gateway and repliers answer through the second,
so every request and reply crossed the bus: no responders fails at once
(`NoResponders`) even for a replier that subscribed a moment ago on the other
gateway, a reply is a message (payload, key, headers) or an error status, and
a scatter-gather request returns the replies that came within its timeout.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import pytest

import tamto_sdk
from tamto_protocol.pipelined import MOST_CALLS_PER_MESSAGE
from tamto_protocol.v1 import gateway_pb2, messages_pb2
from tamto_sdk import EphemeralMessage, Reply
from tamto_sdk.errors import Internal, InvalidArgument, NoResponders, PermissionDenied, Timeout
from tamto_sdk.replies import Handler
from tamto_testing.waiting import eventually
from tests.e2e.test_ephemeral import clients, ephemeral, two_gateways

pytestmark = pytest.mark.e2e

__all__ = ["clients", "two_gateways"]  # fixtures


def echo(message: EphemeralMessage) -> bytes:
    return b"re:" + message.payload


async def test_a_request_nobody_consumes_fails_at_once(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    """NATS's no-responders: the request fails at once, not after its 30 s, and a
    replier that subscribed on the other gateway just before counts at once."""
    one, two = clients
    stream = await ephemeral(one)
    started = time.monotonic()
    with pytest.raises(NoResponders, match=r"no responders: nobody consumes topic 'svc\.a'"):
        await one.request(stream, b"anyone?", topic="svc.a", timeout_s=30)
    assert time.monotonic() - started < 5
    for round_ in range(5):  # the replier's interest is known cluster-wide as it starts
        async with two.reply_handler(stream, echo, match=f"svc.r{round_}"):
            reply = await one.request(stream, b"%d" % round_, topic=f"svc.r{round_}")
            assert reply.payload == b"re:%d" % round_

    # Once the replier left (its gateway announces it), nobody again.
    async def nobody() -> bool:
        try:
            await one.request(stream, b"?", topic="svc.r0", timeout_s=0.5)
        except NoResponders:
            return True
        except Timeout:
            return False
        raise AssertionError("answered by a replier that left")

    await eventually(nobody, 20, "the departed replier is forgotten")


async def test_waiting_for_a_responder_waits_for_the_timeout(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    one, _ = clients
    stream = await ephemeral(one)
    started = time.monotonic()
    with pytest.raises(Timeout, match="within 300 ms"):
        await one.request(stream, b"x", topic="svc", timeout_s=0.3, wait_for_responder=True)
    assert time.monotonic() - started >= 0.25
    with pytest.raises(NoResponders):
        await one.gather(stream, b"x", topic="svc", timeout_s=10)
    assert await one.gather(stream, b"x", timeout_s=0.3, wait_for_responder=True) == []


async def test_a_reply_is_a_message_with_key_and_headers(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    one, two = clients
    stream = await ephemeral(one)

    def answer(message: EphemeralMessage) -> Reply:
        return Reply(
            message.payload.upper(),
            key=b"k-" + message.payload,
            headers={"asked": message.headers["ask"], "topic": message.topic},
        )

    async with two.reply_handler(stream, answer, match="svc.#") as handler:
        reply = await one.request(stream, b"ping", topic="svc.up", headers={"ask": "1"})
        # A handler may also answer with the message it got (an echo).
        async with two.reply_handler(stream, lambda m: m, match="echo"):
            echoed = await one.request(stream, b"same", topic="echo", key=b"k", headers={"h": "v"})
    assert (reply.payload, reply.key, dict(reply.headers)) == (
        b"PING",
        b"k-ping",
        {"asked": "1", "topic": "svc.up"},
    )
    assert reply.response_stream.startswith("reply-")
    assert (echoed.payload, echoed.key, dict(echoed.headers)) == (b"same", b"k", {"h": "v"})
    assert handler.answered == 1
    old_form: Any = reply  # typed as one message now; code written for a batch iterates
    with pytest.warns(DeprecationWarning, match="returns one message"):
        payloads = [m.payload for m in old_form]
    assert payloads == [b"PING"]


async def test_a_handler_that_raises_answers_with_an_error_status(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    one, two = clients
    stream = await ephemeral(one)

    def answer(message: EphemeralMessage) -> bytes:
        if message.payload == b"refuse":
            raise InvalidArgument("quantity must be positive")
        if message.payload == b"deny":
            raise PermissionDenied("not your order")
        raise KeyError("no such order")

    async with two.reply_handler(stream, answer) as handler:
        started = time.monotonic()
        with pytest.raises(InvalidArgument, match="quantity must be positive"):
            await one.request(stream, b"refuse", timeout_s=30)
        assert time.monotonic() - started < 10  # answered, not timed out
        with pytest.raises(PermissionDenied, match="replier answered PERMISSION_DENIED"):
            await one.request(stream, b"deny", timeout_s=30)
        with pytest.raises(Internal, match="UNKNOWN: KeyError: 'no such order'"):
            await one.request(stream, b"crash", timeout_s=30)
        with pytest.raises(InvalidArgument, match=r"error\.code must be a gRPC status code"):
            await two._calls.unary(  # a hand-made reply with code 99
                two._calls.stub.Reply,
                gateway_pb2.ReplyRequest(
                    response_stream="reply-" + "0" * 32,
                    error=messages_pb2.CallStatus(code=99, message="?"),
                ),
            )
    assert handler.failed == 3


async def test_scatter_gather_returns_the_replies_within_the_timeout(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    """Three repliers on both gateways (each a consumer of its own) and one that
    errs: gather returns all four within its timeout, or the first two asked for."""
    one, two = clients
    stream = await ephemeral(one)

    def named(name: bytes) -> Handler:
        return lambda m: name + b":" + m.payload

    def fails(message: EphemeralMessage) -> bytes:
        raise InvalidArgument("not today")

    handlers = [
        one.reply_handler(stream, named(b"a")),
        two.reply_handler(stream, named(b"b")),
        two.reply_handler(stream, named(b"c")),
        two.reply_handler(stream, fails),
    ]
    for handler in handlers:
        await handler.start()
    try:
        started = time.monotonic()
        replies = await one.gather(stream, b"q", timeout_s=1.5)
        assert time.monotonic() - started >= 1.4  # it waited its timeout out
        payloads = sorted(r.payload for r in replies if isinstance(r, EphemeralMessage))
        assert payloads == [b"a:q", b"b:q", b"c:q"]
        errors = [r for r in replies if not isinstance(r, EphemeralMessage)]
        assert len(errors) == 1
        assert isinstance(errors[0], InvalidArgument)
        assert "not today" in str(errors[0])
        started = time.monotonic()
        first_two = await one.gather(stream, b"q", timeout_s=30, max_replies=2)
        assert len(first_two) == 2
        assert time.monotonic() - started < 10
    finally:
        for handler in handlers:
            await handler.close()


async def test_concurrent_requests_and_replies_share_stream_messages(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    """200 requests at once to a replier on the other gateway: each gets its own
    reply, and the calls made while a write was in progress went out together,
    several per gRPC message (requests and replies; the answers too, unseen here)."""
    one, two = clients
    stream = await ephemeral(one)
    async with two.reply_handler(stream, echo, concurrency=256):
        # The streams are open and the gateway said it reads several calls per message.
        assert (await one.request(stream, b"first")).payload == b"re:first"
        before = (one._calls.request_raw.messages_written, two._calls.reply_raw.messages_written)
        payloads = [b"%d" % i for i in range(200)]
        replies = await asyncio.gather(*(one.request(stream, p, timeout_s=30) for p in payloads))
    assert [r.payload for r in replies] == [b"re:" + p for p in payloads]
    requests = one._calls.request_raw.messages_written - before[0]
    answers = two._calls.reply_raw.messages_written - before[1]
    assert requests < 100, requests
    assert answers < 200, answers


async def test_requests_made_at_once_go_together_each_with_its_own_reply_or_error(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    """200 requests made in one turn of the requester's loop leave in as few gRPC
    messages as the per-message limit allows (none alone ahead of the others), and
    each still gets its own answer: its reply, or the error its replier raised."""
    one, two = clients
    stream = await ephemeral(one)

    def answer(message: EphemeralMessage) -> bytes:
        if int(message.payload) % 3 == 0:
            raise InvalidArgument(f"refused {message.payload.decode()}")
        return echo(message)

    async with two.reply_handler(stream, answer, concurrency=256) as handler:
        assert (await one.request(stream, b"1")).payload == b"re:1"  # the streams are open
        before = one._calls.request_raw.messages_written
        payloads = [b"%d" % i for i in range(200)]
        answers = await asyncio.gather(
            *(one.request(stream, p, timeout_s=30) for p in payloads), return_exceptions=True
        )
    assert one._calls.request_raw.messages_written - before == math.ceil(
        200 / MOST_CALLS_PER_MESSAGE
    )
    for i, got in enumerate(answers):
        if i % 3 == 0:
            assert isinstance(got, InvalidArgument), got
            assert f"refused {i}" in str(got)
        else:
            assert isinstance(got, EphemeralMessage), got
            assert got.payload == b"re:%d" % i
    assert handler.failed == len(range(0, 200, 3))
