"""`publish_ephemeral_request` writes the bytes the generated message would."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tamto_protocol.v1 import gateway_pb2, messages_pb2
from tamto_protocol.wire import publish_ephemeral_request


@pytest.mark.parametrize(
    ("stream", "topic", "data", "count"),
    [("s", "orders.eu", b"x" * 300, 2), ("stream-é", "", b"y", 1), ("", "a..b", b"", 0)],
)
def test_publish_ephemeral_request_matches_protobuf(
    stream: str, topic: str, data: bytes, count: int
) -> None:
    expected = gateway_pb2.PublishEphemeralRequest(
        stream=stream, topic=topic, batch=messages_pb2.RecordBatch(arrow_ipc=data, count=count)
    )
    assert publish_ephemeral_request(stream, topic, data, count) == expected.SerializeToString()
    # A pyarrow buffer (what the SDK's IPC writer returns) is written the same.
    assert publish_ephemeral_request(stream, topic, pa.py_buffer(data), count) == (
        expected.SerializeToString()
    )
