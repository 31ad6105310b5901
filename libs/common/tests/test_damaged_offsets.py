"""DATA_LOSS for damaged stored data: one wording, and its parser for the router."""

from __future__ import annotations

import grpc

from tamto_common.errors import damaged_offsets, damaged_offsets_error


def test_the_message_names_the_file_and_offsets_and_parses_back() -> None:
    error = damaged_offsets_error("/d/segment-10-19.parquet", 10, 19, "page CRC failed")
    assert error.code is grpc.StatusCode.DATA_LOSS
    assert not error.retriable
    assert str(error) == (
        "data lost: /d/segment-10-19.parquet holding offsets 10-19 is damaged: page CRC failed"
    )
    assert damaged_offsets(f"storage read: {error}") == (10, 19)


def test_an_open_ended_range_and_other_messages() -> None:
    assert damaged_offsets(str(damaged_offsets_error("/w/0.log", 6, None, "crc"))) == (6, None)
    assert damaged_offsets("epoch file /p/_epoch holds b'x', not an integer") is None
