"""The checksum inside small state files: every single-bit flip is refused."""

from __future__ import annotations

import pytest

from tamto_protocol.checked import dumps_checked, line_checked, loads_checked, parse_line_checked

MEMBERS = frozenset({"version", "ack_floor", "acked_above_floor"})


def flips(data: bytes) -> list[bytes]:
    out = []
    for i in range(len(data)):
        for bit in range(8):
            changed = bytearray(data)
            changed[i] ^= 1 << bit
            out.append(bytes(changed))
    return out


def test_a_json_document_round_trips_and_every_bit_flip_is_refused() -> None:
    doc = {"version": 1, "ack_floor": 120, "acked_above_floor": [[122, 130]]}
    raw = dumps_checked(doc, indent=1)
    assert loads_checked(raw, MEMBERS) == doc
    for damaged in flips(raw):
        try:
            read = loads_checked(damaged, MEMBERS)
        except ValueError:
            continue
        assert read == doc, damaged  # only a flip JSON cannot see (none so far) may pass


def test_a_document_written_before_checksums_still_reads() -> None:
    assert loads_checked(b'{"version": 1, "ack_floor": 3}', MEMBERS) == {
        "version": 1,
        "ack_floor": 3,
    }
    with pytest.raises(ValueError, match="unknown members"):
        loads_checked(b'{"version": 1, "ack_flo/r": 3}', MEMBERS)


def test_a_checked_line_refuses_every_bit_flip() -> None:
    raw = line_checked("42")
    assert parse_line_checked(raw.decode()) == "42"
    assert parse_line_checked("42\n") == "42"  # written before checksums
    for damaged in flips(raw):
        with pytest.raises(ValueError, match=r"checksum|codec"):
            parse_line_checked(damaged.decode())
