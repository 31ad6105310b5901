"""Declarative steps compiled once into a batch transform: columnar kernels, no Python per message.

A declarative function is a list of steps, each a one-key mapping:

- ``{"parse_json": {"fields": {"amount": "float", "region": "string"}}}``: payload fields
  as columns (types: string, int, float, bool);
- ``{"filter": "amount > 0 AND region <> 'test'"}``: keep the rows an SQL expression holds for;
- ``{"project": ["customer", "amount"]}``: the output payload is these columns as JSON
  (later steps still see every column);
- ``{"set_key": "customer"}``, ``{"set_headers": {"region": "region"}}``: from expressions;
- ``{"route": {"by": "region", "outputs": {"eu": "orders-eu"}, "default": "orders-other"}}``:
  rows go to the stream their value names (``default`` absent: unmatched rows are dropped);
- ``{"window": ...}``: tumbling-window aggregates, `tamto_functions.windows`.

Expressions are SQL (Polars' SQL expression parser, a maintained one) over the columns:
parsed fields, ``key`` (text), ``offset``, ``partition``, ``publish_time``,
``event_time`` and every header as ``"headers.<name>"``. Steps run on Polars frames,
which read Arrow memory; a batch's work is a few kernel calls whatever its size.
Compiling checks every step and expression, so a bad spec is refused at deploy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from tamto_common.errors import InvalidArgument
from tamto_functions.expressions import expression
from tamto_functions.windows import Windows, WindowSpec
from tamto_functions.windows import parse as parse_window

#: JSON field types a `parse_json` step accepts, and their Polars types.
FIELD_TYPES: Mapping[str, pl.DataType] = {
    "string": pl.String(),
    "int": pl.Int64(),
    "float": pl.Float64(),
    "bool": pl.Boolean(),
}
#: Distinct header names made columns per batch, at most (the rest are not addressable).
MAX_HEADER_COLUMNS = 32

Frame = pl.DataFrame
#: Headers as steps see them: Arrow's map of strings, as a list of key/value structs.
PAIRS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))
Step = Callable[[Frame], Frame]


@dataclass(frozen=True, slots=True)
class Output:
    """Rows for one stream: `payload`, `key` and `headers` columns, and the input `offset`s."""

    stream: str
    table: pa.Table


@dataclass(frozen=True, slots=True)
class Pipeline:
    """A compiled function: `run(batch)` gives the rows to publish, per output stream."""

    steps: tuple[Step, ...]
    projection: tuple[str, ...] | None
    route: tuple[Callable[[Frame], pl.Series], Mapping[str, str], str | None] | None
    default_output: str
    #: A last `window` step: rows are absorbed into `Windows` and emitted as windows close.
    window: WindowSpec | None = None

    def run(self, table: pa.Table, windows: Windows | None = None) -> list[Output]:
        """The rows `table` gives, per output stream (none yet for a window function)."""
        frame = to_frame(table)
        for step in self.steps:
            frame = step(frame)
        if windows is not None:
            windows.absorb(frame)
            return []
        frame = self._payload(frame)
        if self.route is None:
            return [Output(self.default_output, to_table(frame))]
        by, outputs, default = self.route
        values = by(frame).cast(pl.String)
        routed: list[Output] = []
        for value, stream in outputs.items():
            rows = frame.filter(values == value)
            if rows.height:
                routed.append(Output(stream, to_table(rows)))
        if default is not None:
            rest = frame.filter(~values.is_in(list(outputs)) | values.is_null())
            if rest.height:
                routed.append(Output(default, to_table(rest)))
        return routed

    def _payload(self, frame: Frame) -> Frame:
        if self.projection is None:
            return frame
        encoded = frame.select(pl.struct(list(self.projection)).struct.json_encode())
        return frame.with_columns(payload=encoded.to_series().cast(pl.Binary))


def compile_steps(steps: Sequence[Mapping[str, Any]], output: str) -> Pipeline:
    """The pipeline for `steps`, or `InvalidArgument` naming the bad step and why."""
    compiled: list[Step] = []
    projection: tuple[str, ...] | None = None
    route = None
    window: WindowSpec | None = None
    for index, step in enumerate(steps):
        where = f"code.steps[{index}]"
        if not isinstance(step, Mapping) or len(step) != 1:
            raise InvalidArgument(f"{where}: a step is a mapping with one key (its kind)")
        ((kind, value),) = step.items()
        if route is not None or window is not None:
            raise InvalidArgument(f"{where}: 'route' and 'window' must be the last step")
        if kind == "route":
            route = _route(where, value)
        elif kind == "window":
            if projection is not None:
                raise InvalidArgument(f"{where}: a window's payload is its aggregates; no project")
            window = parse_window(where, value)
        elif kind == "project":
            projection = _names(where, value)
            compiled.append(_project(projection))
        else:
            compiled.append(_step(where, kind, value))
    return Pipeline(tuple(compiled), projection, route, output, window)


def _step(where: str, kind: str, value: Any) -> Step:
    if kind == "parse_json":
        return _parse_json(where, value)
    if kind == "filter":
        condition = expression(f"{where}.filter", value)
        return lambda frame: frame.filter(condition)
    if kind == "set_key":
        key = expression(f"{where}.set_key", value)
        return lambda frame: frame.with_columns(key=key.cast(pl.String).cast(pl.Binary))
    if kind == "set_headers":
        return _set_headers(where, value)
    raise InvalidArgument(
        f"{where}: unknown step {kind!r} (parse_json, filter, project, set_key, set_headers,"
        " route, window)"
    )


def _parse_json(where: str, value: Any) -> Step:
    fields = value.get("fields") if isinstance(value, Mapping) else None
    if not isinstance(fields, Mapping) or not fields:
        raise InvalidArgument(f"{where}.parse_json.fields: name the fields and their types")
    schema: dict[str, pl.DataType] = {}
    for name, type_name in fields.items():
        if type_name not in FIELD_TYPES:
            raise InvalidArgument(
                f"{where}.parse_json.fields.{name}: type {type_name!r} is not one of"
                f" {', '.join(FIELD_TYPES)}"
            )
        schema[str(name)] = FIELD_TYPES[type_name]
    struct = pl.Struct(schema)

    def parse(frame: Frame) -> Frame:
        parsed = frame["payload"].cast(pl.String).str.json_decode(struct)
        return frame.with_columns(parsed.struct.unnest())

    return parse


def _set_headers(where: str, value: Any) -> Step:
    if not isinstance(value, Mapping) or not value:
        raise InvalidArgument(f"{where}.set_headers: a mapping of header name to expression")
    values = {
        str(name): expression(f"{where}.set_headers.{name}", text) for name, text in value.items()
    }

    def set_headers(frame: Frame) -> Frame:
        pairs = [
            pl.struct(key=pl.lit(name), value=expr.cast(pl.String)) for name, expr in values.items()
        ]
        added = pl.concat_list(pairs)
        if "headers" in frame.columns:
            return frame.with_columns(
                headers=pl.when(pl.col("headers").is_null())
                .then(added)
                .otherwise(pl.concat_list([pl.col("headers"), added]))
            )
        return frame.with_columns(headers=added)

    return set_headers


def _names(where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise InvalidArgument(f"{where}.project: a non-empty list of column names")
    return tuple(value)


def _project(names: tuple[str, ...]) -> Step:
    def project(frame: Frame) -> Frame:
        missing = [n for n in names if n not in frame.columns]
        if missing:
            raise KeyError(f"project: no column {missing[0]!r}")
        return frame

    return project


def _route(
    where: str, value: Any
) -> tuple[Callable[[Frame], pl.Series], Mapping[str, str], str | None]:
    if not isinstance(value, Mapping) or not isinstance(value.get("outputs"), Mapping):
        raise InvalidArgument(f"{where}.route: give 'by' and 'outputs' (value to stream)")
    by = expression(f"{where}.route.by", value.get("by"))
    outputs = {str(k): str(v) for k, v in value["outputs"].items()}
    if not outputs or not all(outputs.values()):
        raise InvalidArgument(f"{where}.route.outputs: map each value to a stream")
    default = value.get("default")
    return (lambda frame: frame.select(by).to_series()), outputs, default


def to_frame(table: pa.Table) -> Frame:
    """A batch's table as a frame: key as text, and every header as ``headers.<name>``."""
    frame = pl.from_arrow(_headers_as_pairs(table))
    assert isinstance(frame, pl.DataFrame)
    columns: list[pl.Expr | pl.Series] = []
    if "key" in frame.columns:
        columns.append(pl.col("key").cast(pl.String, strict=False).alias("key"))
    if "headers" in table.column_names:
        for name in header_names(table.column("headers")):
            values = pc.map_lookup(table.column("headers"), name, "first")
            columns.append(pl.Series(f"headers.{name}", values))
    return frame.with_columns(columns) if columns else frame


def _headers_as_pairs(table: pa.Table) -> pa.Table:
    """Headers (an Arrow map) as a list of key/value structs, which steps can extend."""
    if "headers" not in table.column_names:
        return table
    index = table.column_names.index("headers")
    return table.set_column(index, "headers", table.column("headers").cast(PAIRS))


def header_names(headers: pa.ChunkedArray) -> list[str]:
    """The distinct header names in a batch, at most `MAX_HEADER_COLUMNS`."""
    keys = [chunk.keys for chunk in headers.chunks if len(chunk)]
    if not keys:
        return []
    names = pc.unique(pa.concat_arrays(keys)).to_pylist()
    return sorted(str(n) for n in names if n is not None)[:MAX_HEADER_COLUMNS]


def to_table(frame: Frame) -> pa.Table:
    """The frame's rows to publish: payload, key, headers (as Tamto's batch types) and offset."""
    columns: dict[str, pa.Array | pa.ChunkedArray] = {
        "payload": frame["payload"].cast(pl.Binary).to_arrow(),
        "offset": frame["offset"].to_arrow(),
    }
    if "key" in frame.columns:
        columns["key"] = frame["key"].cast(pl.Binary).to_arrow()
    if "headers" in frame.columns:
        columns["headers"] = _headers(frame["headers"])
    return pa.table(columns)


def _headers(series: pl.Series) -> pa.Array:
    """Polars' list of key/value structs back to Arrow's map of strings."""
    pairs = series.to_arrow()
    if isinstance(pairs, pa.ChunkedArray):
        pairs = pairs.combine_chunks()
    if pa.types.is_map(pairs.type):
        return pairs.cast(pa.map_(pa.string(), pa.string()))
    pairs = pairs.cast(pa.large_list(pa.struct([("key", pa.string()), ("value", pa.string())])))
    flat = pairs.flatten()
    offsets = pc.cast(pairs.offsets, pa.int32())
    return pa.MapArray.from_arrays(
        offsets, flat.field("key"), flat.field("value"), mask=pairs.is_null()
    )
