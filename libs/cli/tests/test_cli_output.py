"""The CLI's message rendering and header parsing (tamto_cli.output)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

import tamto_sdk
from tamto_cli.output import PayloadFormat, message_json, parse_headers, render_payload


def test_parse_headers_takes_the_first_equals_sign() -> None:
    assert parse_headers(["trace=t1", "q=a=b", "empty="]) == {
        "trace": "t1",
        "q": "a=b",
        "empty": "",
    }
    assert parse_headers(None) == {}


@pytest.mark.parametrize("pair", ["novalue", "=v"])
def test_parse_headers_names_a_bad_pair(pair: str) -> None:
    with pytest.raises(ValueError, match=repr(pair)):
        parse_headers([pair])


@pytest.mark.parametrize(
    ("payload", "form", "shown"),
    [
        (b'{"a":1}', PayloadFormat.RAW, '{"a":1}'),
        (b'{"a":1}', PayloadFormat.JSON, '{\n  "a": 1\n}'),
        (b"not json", PayloadFormat.JSON, "not json"),
        (b"\x00\xff", PayloadFormat.HEX, "00ff"),
    ],
)
def test_render_payload(payload: bytes, form: PayloadFormat, shown: str) -> None:
    assert render_payload(payload, form) == shown


def test_message_json_is_one_line_with_every_field() -> None:
    message = tamto_sdk.Message(
        stream="s",
        partition=1,
        offset=7,
        payload=b'{"n": 2}',
        key=b"k",
        headers={"h": "v"},
        id="p:1",
        publish_time=datetime(2026, 1, 2, tzinfo=UTC),
        delivery_count=3,
    )
    line = message_json(message, PayloadFormat.JSON)
    assert "\n" not in line
    assert json.loads(line) == {
        "stream": "s",
        "partition": 1,
        "offset": 7,
        "key": "k",
        "headers": {"h": "v"},
        "id": "p:1",
        "publish_time": "2026-01-02T00:00:00+00:00",
        "delivery_count": 3,
        "payload": {"n": 2},
    }
    assert json.loads(message_json(message, PayloadFormat.HEX))["payload"] == b'{"n": 2}'.hex()
