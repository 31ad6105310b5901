"""Unit tests of `tamto_sdk.columns`: the producer's Arrow column building."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest

from tamto_protocol.batch import HEADERS_TYPE, ID_TYPE, KEY_TYPE, decode_batch
from tamto_sdk import columns


def test_plain_messages_have_null_optional_columns_and_their_payloads() -> None:
    key, payload, headers, ids, event_time = columns.message_columns([b"a", b"", b"ccc"])
    assert payload.to_pylist() == [b"a", b"", b"ccc"]
    for column in (key, headers, ids, event_time):
        assert len(column) == 3
        assert column.null_count == 3
    assert key.type == KEY_TYPE
    assert headers.type == HEADERS_TYPE
    assert ids.type == ID_TYPE


def test_messages_with_fields_keep_each_field_in_its_row() -> None:
    when_us = 1_700_000_000_000_000
    key, payload, headers, ids, event_time = columns.message_columns(
        [b"p0", b"p1"],
        keys=[b"k0", None],
        headers=[None, {"h": "v"}],
        ids=["id-0", None],
        event_times=[None, when_us],
    )
    assert payload.to_pylist() == [b"p0", b"p1"]
    assert key.to_pylist() == [b"k0", None]
    assert headers.to_pylist() == [None, [("h", "v")]]
    assert ids.to_pylist() == ["id-0", None]
    assert event_time.to_pylist() == [None, datetime.fromtimestamp(when_us / 1e6, UTC)]


def test_concat_keeps_the_parts_in_order() -> None:
    first = columns.message_columns([b"a"])
    second = columns.message_columns(
        [b"b"], keys=[b"k"], headers=[None], ids=["x"], event_times=[None]
    )
    joined = columns.concat_columns([first, second])
    assert joined[1].to_pylist() == [b"a", b"b"]
    assert joined[0].to_pylist() == [None, b"k"]
    assert joined[3].to_pylist() == [None, "x"]
    assert columns.concat_columns([first]) is first


def test_with_ids_fills_only_the_missing_ids_in_row_order() -> None:
    given = pa.array([None, "mine", None, None], ID_TYPE)
    filled = columns.with_ids(given, "prod", 7)
    assert filled.to_pylist() == ["prod:7", "mine", "prod:8", "prod:9"]
    everything = columns.with_ids(pa.nulls(2, ID_TYPE), "prod", 0)
    assert everything.to_pylist() == ["prod:0", "prod:1"]
    complete = pa.array(["a", "b"], ID_TYPE)
    assert columns.with_ids(complete, "prod", 0) is complete


def test_row_sizes_count_payload_key_headers_and_overhead() -> None:
    batch = columns.batch_columns(
        [b"12345", b"1"],
        keys=[b"kk", None],
        headers=[{"ab": "cde"}, None],
        ids=None,
        event_times=None,
    )
    overhead = columns.MESSAGE_OVERHEAD
    assert columns.row_sizes(batch).to_pylist() == [5 + 2 + 5 + overhead, 1 + overhead]


def test_batch_columns_from_a_table_take_its_named_columns() -> None:
    table = pa.table({"payload": [b"x", b"y"], "key": [b"k", None], "unrelated": [1, 2]})
    key, payload, headers, ids, event_time = columns.batch_columns(table, None, None, None, None)
    assert payload.to_pylist() == [b"x", b"y"]
    assert key.to_pylist() == [b"k", None]
    assert headers.null_count == ids.null_count == event_time.null_count == 2


def test_batch_columns_take_integer_event_times_as_microseconds() -> None:
    *_, event_time = columns.batch_columns([b"x"], None, None, None, pa.array([1_000_000]))
    assert event_time.to_pylist() == [datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)]


@pytest.mark.parametrize(
    ("messages", "kwargs", "error", "match"),
    [
        (b"one payload", {}, TypeError, "not one payload"),
        (["text"], {}, TypeError, "payload values must be bytes"),
        ([b"a", None], {}, ValueError, "must not be null"),
        ([b"a", b"b"], {"keys": [b"k"]}, ValueError, "key has 1 entries for 2 payloads"),
        (pa.table({"key": [b"k"]}), {}, ValueError, "no payload column"),
        (pa.table({"payload": [b"p"]}), {"ids": ["x"]}, TypeError, "as its columns"),
        ([b"a"], {"ids": [3]}, TypeError, "id column"),
    ],
)
def test_batch_columns_refuse_bad_input_precisely(
    messages: object, kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    given: dict[str, object] = {"keys": None, "headers": None, "ids": None, "event_times": None}
    given.update(kwargs)
    with pytest.raises(error, match=match):
        columns.batch_columns(messages, **given)


def test_encode_round_trips_through_the_batch_schema() -> None:
    batch = columns.batch_columns(
        [b"p"], keys=[b"k"], headers=[{"h": "v"}], ids=["i"], event_times=None
    )
    decoded = decode_batch(columns.encode(batch, "me").to_pybytes())
    row = decoded.to_pylist()[0]
    assert (row["payload"], row["key"], row["headers"], row["id"], row["producer"]) == (
        b"p",
        b"k",
        [("h", "v")],
        "i",
        "me",
    )
