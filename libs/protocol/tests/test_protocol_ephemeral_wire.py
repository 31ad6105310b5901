"""`publish_ephemeral_request` writes the bytes the generated message would (unary
and pipelined, with a `call_id`)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tamto_protocol.v1 import gateway_pb2, messages_pb2
from tamto_protocol.wire import publish_ephemeral_request


@pytest.mark.parametrize(
    ("stream", "topic", "data", "count", "call_id"),
    [
        ("s", "orders.eu", b"x" * 300, 2, 0),
        ("stream-é", "", b"y", 1, 7),
        ("", "a..b", b"", 0, 2**64 - 1),
    ],
)
def test_publish_ephemeral_request_matches_protobuf(
    stream: str, topic: str, data: bytes, count: int, call_id: int
) -> None:
    expected = gateway_pb2.PublishEphemeralRequest(
        stream=stream,
        topic=topic,
        batch=messages_pb2.RecordBatch(arrow_ipc=data, count=count),
        call_id=call_id,
    ).SerializeToString()
    assert publish_ephemeral_request(stream, topic, data, count, call_id) == expected
    # A pyarrow buffer (what the SDK's IPC writer returns) is written the same.
    assert publish_ephemeral_request(stream, topic, pa.py_buffer(data), count, call_id) == expected


def test_further_runs_are_written_as_the_generated_message_does() -> None:
    runs = [("orders.us", b"u" * 200, 3), ("", b"", 0), ("audit", b"a", 1)]
    expected = gateway_pb2.PublishEphemeralRequest(
        stream="s",
        topic="orders.eu",
        batch=messages_pb2.RecordBatch(arrow_ipc=b"e", count=1),
        more_runs=[
            gateway_pb2.EphemeralRun(topic=t, batch=messages_pb2.RecordBatch(arrow_ipc=d, count=c))
            for t, d, c in runs
        ],
        call_id=5,
    ).SerializeToString()
    written = publish_ephemeral_request(
        "s", "orders.eu", b"e", 1, 5, more_runs=[(t, pa.py_buffer(d), c) for t, d, c in runs]
    )
    assert written == expected
