"""Micro-benchmark of one request/reply round trip's message handling, per process:
the one-message Arrow batch each request and reply carried before, against the
`SingleMessage` both ends now read (`tamto_protocol.single_message`).

CPU time (`time.process_time`, so a loaded machine moves it less than wall time)
of what each process does to one request and its reply besides gRPC and the
event loop: the requester writes the request and reads the reply, the replier
reads the delivered request and writes its reply, the gateway checks both,
writes the delivery and the answer (docs/benchmarks.md, request/reply):

    .venv/bin/python scripts/bench_single_messages.py
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from tamto_gateway.ephemeral_consumer import encode_delivery
from tamto_protocol.batch import decode_batch, validate_batch
from tamto_protocol.single_message import check_single_message
from tamto_protocol.v1 import gateway_pb2
from tamto_sdk.ephemeral_messages import EphemeralBatch, encode_messages, single_message

PAYLOAD = os.urandom(100)
LIMIT = 1 << 20
ONE = gateway_pb2.SingleMessage(payload=PAYLOAD)
BATCH = encode_messages([PAYLOAD])


def best_us(run: Callable[[], object], calls: int = 2000, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        for _ in range(calls):
            run()
        best = min(best, (time.process_time() - started) / calls * 1e6)
    return best


def answer(**reply: object) -> bytes:
    response = gateway_pb2.RequestResponse(response_stream="r", **reply)  # type: ignore[arg-type]
    return gateway_pb2.RequestStreamResponse(call_id=1, response=response).SerializeToString()


def requester_batch() -> None:
    gateway_pb2.RequestRequest(
        stream="s", topic="t", batch=encode_messages([PAYLOAD], [None], [None]), call_id=1
    ).SerializeToString()
    got = gateway_pb2.RequestStreamResponse.FromString(ANSWER_BATCH).response
    batch = EphemeralBatch("r", "", decode_batch(got.batch.arrow_ipc), "r")
    assert next(iter(batch)).payload == PAYLOAD


def requester_single() -> None:
    request = gateway_pb2.RequestRequest(stream="s", topic="t", call_id=1)
    request.message.payload = PAYLOAD
    request.SerializeToString()
    got = gateway_pb2.RequestStreamResponse.FromString(ANSWER_SINGLE).response.message
    assert (got.payload, dict(got.headers)) == (PAYLOAD, {})


def replier(delivery: bytes) -> Callable[[], None]:
    def run() -> None:
        parsed = gateway_pb2.EphemeralDelivery.FromString(delivery)
        reply = gateway_pb2.ReplyRequest(response_stream="reply-x", call_id=1)
        if parsed.HasField("message"):
            reply.message.payload = single_message(parsed).payload
        else:
            message = next(iter(EphemeralBatch._from_delivery(parsed)))
            reply.batch.CopyFrom(encode_messages([message.payload]))
        reply.SerializeToString()

    return run


def gateway(request: bytes, reply: bytes) -> Callable[[], None]:
    def run() -> None:
        asked = gateway_pb2.RequestRequest.FromString(request)
        answered = gateway_pb2.ReplyRequest.FromString(reply)
        if asked.HasField("message"):
            check_single_message(asked.message, LIMIT)
            encode_delivery("s", "t", b"", 1, "reply-x", 1, asked.message.SerializeToString())
            check_single_message(answered.message, LIMIT)
            answer(message=answered.message)
        else:
            validate_batch(asked.batch.arrow_ipc, 1, LIMIT)
            encode_delivery("s", "t", asked.batch.arrow_ipc, 1, "reply-x", 1)
            validate_batch(answered.batch.arrow_ipc, 1, LIMIT)
            answer(batch=answered.batch)

    return run


ANSWER_BATCH = answer(batch=BATCH)
ANSWER_SINGLE = answer(message=ONE)


def main() -> None:
    delivered_batch = encode_delivery("s", "t", BATCH.arrow_ipc, 1, "reply-x", 1)
    delivered_single = encode_delivery("s", "t", b"", 1, "reply-x", 1, ONE.SerializeToString())
    request = {
        "batch": gateway_pb2.RequestRequest(stream="s", topic="t", batch=BATCH, call_id=1),
        "single": gateway_pb2.RequestRequest(stream="s", topic="t", message=ONE, call_id=1),
    }
    reply = {
        "batch": gateway_pb2.ReplyRequest(response_stream="r", batch=BATCH, call_id=1),
        "single": gateway_pb2.ReplyRequest(response_stream="r", message=ONE, call_id=1),
    }
    wire = {
        form: (request[form].SerializeToString(), reply[form].SerializeToString())
        for form in request
    }
    rows: list[tuple[str, Callable[[], object], Callable[[], object]]] = [
        ("requester", requester_batch, requester_single),
        ("replier", replier(delivered_batch), replier(delivered_single)),
        ("gateway", gateway(*wire["batch"]), gateway(*wire["single"])),
    ]
    print(f"{'process':10} {'batch µs':>9} {'single µs':>10}   (100 B, CPU per round trip)")
    for name, batch_run, single_run in rows:
        print(f"{name:10} {best_us(batch_run):9.1f} {best_us(single_run):10.1f}")
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
