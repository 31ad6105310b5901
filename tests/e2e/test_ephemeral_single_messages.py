"""Requests and replies as single messages (`tamto_protocol.single_message`), on a
real cluster: through one gateway both ends read `SingleMessage`s and no Arrow
batch is made for them, yet a subscriber reading batches, a client of the unary
`Request` and a requester on another gateway still get batches, as always."""

from __future__ import annotations

import asyncio

import pytest

import tamto_sdk
from tamto_protocol.batch import decode_batch
from tamto_protocol.capabilities import SINGLE_MESSAGE_METADATA
from tamto_protocol.v1 import gateway_pb2
from tamto_sdk import EphemeralMessage, Reply
from tamto_sdk.ephemeral_messages import encode_messages
from tamto_sdk.ephemeral_subscription import EphemeralSubscription
from tamto_testing.waiting import eventually
from tests.e2e.test_ephemeral import clients, ephemeral, two_gateways

pytestmark = pytest.mark.e2e

__all__ = ["clients", "two_gateways"]  # fixtures


def answer(message: EphemeralMessage) -> Reply:
    return Reply(
        message.payload.upper(),
        key=b"k-" + (message.key or b""),
        headers={"asked": message.headers.get("ask", ""), "topic": message.topic},
    )


async def test_one_gateway_carries_requests_and_replies_as_single_messages(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    """Key and headers go both ways; the replier's subscription got the request as a
    `SingleMessage` and a plain subscriber of the same topic got it as a batch."""
    one, _ = clients
    stream = await ephemeral(one)
    raw = EphemeralSubscription(
        one._calls, stream, match="svc.#", group="", consumer_name="", single_messages=True
    )
    async with one.reply_handler(stream, answer, match="svc.#", group="r") as handler:
        # The first request and reply open their streams, whose gateway then says it
        # reads single messages: they went as batches.

        warm = 0

        async def both_read_single() -> bool:
            nonlocal warm
            await one.request(stream, b"warm", topic="svc.w")
            warm += 1
            says = one._calls.request_raw.peer_says & one._calls.reply_raw.peer_says
            return SINGLE_MESSAGE_METADATA in says

        await eventually(both_read_single, 10, "requests and replies go as single messages")
        # A reply's acknowledgement may reach the replier after its requester got it.
        await eventually(lambda: handler.answered == warm, 10, "the warm-up replies counted")
        answered = handler.answered
        async with one.subscribe(stream, match="svc.#") as batches, raw:
            reply = await one.request(
                stream, b"ping", topic="svc.a", key=b"q", headers={"ask": "1"}
            )
            batch = await asyncio.wait_for(batches.receive_batch(), 10)
            single = await asyncio.wait_for(raw._next_delivery(), 10)
    assert (reply.payload, reply.key, dict(reply.headers)) == (
        b"PING",
        b"k-q",
        {"asked": "1", "topic": "svc.a"},
    )
    assert handler.answered == answered + 1
    assert batch is not None
    [seen] = list(batch)
    assert (seen.payload, seen.key, dict(seen.headers), seen.topic) == (
        b"ping",
        b"q",
        {"ask": "1"},
        "svc.a",
    )
    assert seen.response_stream == reply.response_stream
    assert single.HasField("message")
    assert not single.HasField("batch")
    assert (single.message.payload, single.message.key, dict(single.message.headers)) == (
        b"ping",
        b"q",
        {"ask": "1"},
    )


async def test_a_unary_request_gets_a_batch_reply(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    """A client that never said it reads single messages (the unary Request, as an
    older SDK's fallback sends it) gets the reply as a batch, though the replier on
    the same gateway sent a `SingleMessage`."""
    one, _ = clients
    stream = await ephemeral(one)
    async with one.reply_handler(stream, answer, match="svc.#"):

        async def replier_reads_single() -> bool:
            await one.request(stream, b"warm", topic="svc.w")  # opens the replier's stream
            return SINGLE_MESSAGE_METADATA in one._calls.reply_raw.peer_says

        await eventually(replier_reads_single, 10, "the replier sends single messages")
        request = gateway_pb2.RequestRequest(
            stream=stream, topic="svc.u", batch=encode_messages([b"old"], [b"k"], [None])
        )
        metadata = await one._calls.auth.metadata()
        response = await one._calls.stub.Request(request, metadata=metadata)
    assert not response.HasField("message")
    decoded = decode_batch(response.batch.arrow_ipc).to_pylist()
    assert [(r["payload"], r["key"]) for r in decoded] == [(b"OLD", b"k-k")]


async def test_across_gateways_a_single_message_reply_travels_as_a_batch(
    clients: tuple[tamto_sdk.Client, tamto_sdk.Client],
) -> None:
    """A replier on the other gateway answers with a `SingleMessage`; between the
    gateways it is a batch (any gateway version reads it), and the requester gets it
    with its key and headers."""
    one, two = clients
    stream = await ephemeral(one)
    async with two.reply_handler(stream, answer, match="svc.#"):
        replies = await asyncio.gather(
            *(one.request(stream, b"x%d" % i, topic="svc.b", key=b"%d" % i) for i in range(20))
        )
    assert [(r.payload, r.key, r.headers["topic"]) for r in replies] == [
        (b"X%d" % i, b"k-%d" % i, "svc.b") for i in range(20)
    ]
    assert SINGLE_MESSAGE_METADATA in two._calls.reply_raw.peer_says
