"""Declarative steps: what each does to a batch, and how a bad one is refused at compile."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from tamto_functions.declarative import compile_steps

from tamto_common.errors import InvalidArgument

HEADERS = pa.map_(pa.string(), pa.string())
FIELDS = {"parse_json": {"fields": {"amount": "float", "region": "string", "customer": "string"}}}


def batch(
    rows: list[dict[str, Any]], headers: list[dict[str, str] | None] | None = None
) -> pa.Table:
    n = len(rows)
    pairs = [list(h.items()) if h else None for h in (headers or [None] * n)]
    return pa.table(
        {
            "offset": pa.array(range(100, 100 + n), pa.int64()),
            "payload": pa.array([json.dumps(r).encode() for r in rows], pa.binary()),
            "key": pa.array([None] * n, pa.binary()),
            "headers": pa.array(pairs, HEADERS),
        }
    )


ORDERS = [
    {"amount": 10.5, "region": "eu", "customer": "c1"},
    {"amount": -1, "region": "us", "customer": "c2"},
    {"amount": 3, "region": "ap", "customer": "c3"},
    {"amount": 7, "region": "us", "customer": "c4"},
]


def test_filter_project_and_key_make_the_output_rows() -> None:
    pipeline = compile_steps(
        [FIELDS, {"filter": "amount > 0"}, {"set_key": "customer"}, {"project": ["customer"]}],
        "valid",
    )
    (out,) = pipeline.run(batch(ORDERS))
    assert out.stream == "valid"
    assert out.table.column("offset").to_pylist() == [100, 102, 103]
    assert out.table.column("key").to_pylist() == [b"c1", b"c3", b"c4"]
    assert [json.loads(p) for p in out.table.column("payload").to_pylist()] == [
        {"customer": "c1"},
        {"customer": "c3"},
        {"customer": "c4"},
    ]


def test_headers_are_readable_and_settable() -> None:
    pipeline = compile_steps(
        [FIELDS, {"filter": "\"headers.source\" = 'web'"}, {"set_headers": {"region": "region"}}],
        "out",
    )
    sources = [{"source": "web"}, {"source": "app"}, None, {"source": "web", "x": "1"}]
    (out,) = pipeline.run(batch(ORDERS, sources))
    assert out.table.column("offset").to_pylist() == [100, 103]
    assert out.table.column("headers").to_pylist() == [
        [("source", "web"), ("region", "eu")],
        [("source", "web"), ("x", "1"), ("region", "us")],
    ]


def test_route_sends_each_row_to_the_stream_its_value_names() -> None:
    pipeline = compile_steps(
        [
            FIELDS,
            {"route": {"by": "region", "outputs": {"eu": "eu", "us": "us"}, "default": "rest"}},
        ],
        "unused",
    )
    routed = {o.stream: o.table.column("offset").to_pylist() for o in pipeline.run(batch(ORDERS))}
    assert routed == {"eu": [100], "us": [101, 103], "rest": [102]}


def test_route_without_a_default_drops_unmatched_rows() -> None:
    pipeline = compile_steps([FIELDS, {"route": {"by": "region", "outputs": {"eu": "eu"}}}], "x")
    assert [o.stream for o in pipeline.run(batch(ORDERS))] == ["eu"]


@pytest.mark.parametrize(
    ("steps", "named"),
    [
        ([{"filter": "amount >"}], "code.steps[0].filter"),
        ([{"explode": 1}], "unknown step 'explode'"),
        ([{"parse_json": {"fields": {"a": "decimal"}}}], "code.steps[0].parse_json.fields.a"),
        ([{"route": {"by": "r", "outputs": {"a": "x"}}}, {"filter": "true"}], "code.steps[1]"),
        ([{"project": []}], "code.steps[0].project"),
        ([{"filter": "a > 1", "project": ["a"]}], "code.steps[0]"),
    ],
)
def test_a_bad_step_is_refused_naming_it(steps: list[dict[str, Any]], named: str) -> None:
    with pytest.raises(InvalidArgument, match=named.replace("[", r"\[").replace("]", r"\]")):
        compile_steps(steps, "out")


def test_a_batch_of_bad_json_raises_so_the_runner_can_isolate_it() -> None:
    pipeline = compile_steps([FIELDS, {"filter": "amount > 0"}], "out")
    table = batch(ORDERS).set_column(1, "payload", pa.array([b"{not json"] * 4, pa.binary()))
    with pytest.raises(Exception, match=r"(?i)json|decode|parse"):
        pipeline.run(table)


def test_a_sliced_batch_with_headers_runs() -> None:
    """A delivered batch is often a slice of a larger one (its arrays start past 0)."""
    pipeline = compile_steps([FIELDS, {"filter": "amount > 0"}], "out")
    sources = [{"s": "a"}, None, {"s": "b"}, {"s": "c"}]
    (out,) = pipeline.run(batch(ORDERS, sources).slice(1))
    assert out.table.column("offset").to_pylist() == [102, 103]
    assert out.table.column("headers").to_pylist() == [[("s", "b")], [("s", "c")]]


def test_expressions_read_the_input_partition() -> None:
    pipeline = compile_steps([{"filter": "partition = 3 AND offset > 101"}], "out")
    (out,) = pipeline.run(batch(ORDERS), partition=3)
    assert out.table.column("offset").to_pylist() == [102, 103]
    (none,) = pipeline.run(batch(ORDERS), partition=2)
    assert none.table.num_rows == 0
