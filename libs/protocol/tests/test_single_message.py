"""`SingleMessage`'s limits (those of a batch's message) and its batch form."""

from __future__ import annotations

import pytest

from tamto_protocol.batch import decode_batch, validate_batch
from tamto_protocol.message_size import MAX_HEADERS_BYTES, MAX_KEY_BYTES, MessageTooLarge
from tamto_protocol.single_message import as_batch, check_single_message
from tamto_protocol.v1 import gateway_pb2


def test_a_single_message_keeps_a_batch_messages_limits() -> None:
    check_single_message(gateway_pb2.SingleMessage(payload=b"x" * 100, key=b"k"), 101)
    with pytest.raises(MessageTooLarge, match="102 bytes"):
        check_single_message(gateway_pb2.SingleMessage(payload=b"x" * 100, key=b"kk"), 101)
    with pytest.raises(MessageTooLarge, match="key"):
        check_single_message(gateway_pb2.SingleMessage(key=b"k" * (MAX_KEY_BYTES + 1)), 0)
    big = {"h": "é" * (MAX_HEADERS_BYTES // 2)}  # counted in bytes, not characters
    with pytest.raises(MessageTooLarge, match="headers"):
        check_single_message(gateway_pb2.SingleMessage(headers=big), 0)


@pytest.mark.parametrize(
    ("key", "headers"), [(None, {}), (b"", {"a": "1"}), (b"key", {"a": "1", "é": "ü"})]
)
def test_as_batch_is_the_same_message_as_a_valid_one_message_batch(
    key: bytes | None, headers: dict[str, str]
) -> None:
    message = gateway_pb2.SingleMessage(payload=b"\x00payload", headers=headers)
    if key is not None:
        message.key = key
    batch = as_batch(message)
    assert batch.count == 1
    validate_batch(batch.arrow_ipc, 1, 1 << 20)
    [row] = decode_batch(batch.arrow_ipc).to_pylist()
    assert row["payload"] == b"\x00payload"
    assert row["key"] == key  # absent stays null, empty stays empty
    assert dict(row["headers"] or []) == headers
