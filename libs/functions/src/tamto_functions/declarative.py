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
``event_time`` and every header as ``"headers.<name>"``. The steps run as one lazy
Polars query over only the columns they read (Polars reads Arrow memory), collected
once per batch: a batch's work is a few kernel calls whatever its size, and columns no
step writes (a pass-through's payload, key and headers) are taken from the input as
they are.
Compiling checks every step and expression, so a bad spec is refused at deploy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
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

Frame = pl.LazyFrame
#: Headers as steps see them: Arrow's map of strings, as a list of key/value structs.
PAIRS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))
Step = Callable[[Frame], Frame]
#: The input row each frame row came from: untouched columns are taken from the input by it.
ROW = "__row"
#: A route step's value per row.
ROUTE = "__route"
#: The batch columns an expression may name, besides parsed fields and headers.
BATCH_COLUMNS = ("offset", "publish_time", "key", "payload", "id", "event_time", "producer")
Route = tuple[pl.Expr, Mapping[str, str], str | None]


@dataclass(frozen=True, slots=True)
class Output:
    """Rows for one stream: `payload`, `key` and `headers` columns, and the input `offset`s."""

    stream: str
    table: pa.Table


@dataclass(frozen=True, slots=True)
class Pipeline:
    """A compiled function: `run(batch)` gives the rows to publish, per output stream.

    The steps run as one lazy Polars query over only the columns they read (and a row
    index), collected once per batch; the output's payload, key and headers are taken
    from the input by that index unless a step wrote them.
    """

    steps: tuple[Step, ...]
    projection: tuple[str, ...] | None
    route: Route | None
    default_output: str
    #: A last `window` step: rows are absorbed into `Windows` and emitted as windows close.
    window: WindowSpec | None = None
    #: The names the steps read (columns, parsed fields and ``headers.<name>``).
    reads: frozenset[str] = frozenset()
    #: The output columns (payload, key, headers) a step writes.
    writes: frozenset[str] = frozenset()

    def run(
        self, table: pa.Table, windows: Windows | None = None, partition: int = -1
    ) -> list[Output]:
        """The rows `table` (of input `partition`) gives, per output stream (none yet for
        a window function)."""
        frame = self._input(table, partition)
        for step in self.steps:
            frame = step(frame)
        if windows is not None:
            windows.absorb(frame.collect())
            return []
        if self.projection is not None:
            encoded = pl.struct(list(self.projection)).struct.json_encode().cast(pl.Binary)
            frame = frame.with_columns(encoded.alias("payload"))
        if self.route is not None:
            frame = frame.with_columns(self.route[0].cast(pl.String).alias(ROUTE))
        written = [c for c in ("payload", "key", "headers") if c in self.writes]
        rows = frame.select(ROW, *written, *([ROUTE] if self.route else [])).collect()
        if self.route is None:
            return [Output(self.default_output, self._table(table, rows))]
        _, outputs, default = self.route
        values = rows[ROUTE]
        routed: list[Output] = []
        for value, stream in outputs.items():
            chosen = rows.filter(values == value)
            if chosen.height:
                routed.append(Output(stream, self._table(table, chosen)))
        if default is not None:
            rest = rows.filter(~values.is_in(list(outputs)) | values.is_null())
            if rest.height:
                routed.append(Output(default, self._table(table, rest)))
        return routed

    def _input(self, table: pa.Table, partition: int) -> Frame:
        """The columns the steps read, as a lazy frame with the row index."""
        columns: dict[str, pa.Array | pa.ChunkedArray] = {
            name: table.column(name)
            for name in BATCH_COLUMNS
            if name in self.reads and name != "key" and name in table.column_names
        }
        if "key" in self.reads and "key" in table.column_names:
            columns["key"] = pc.cast(table.column("key"), pa.string(), safe=False)
        if "headers" in table.column_names:
            headers = table.column("headers")
            if "headers" in self.writes:
                columns["headers"] = headers.cast(PAIRS)
            for name in sorted(self.reads):
                if name.startswith("headers."):
                    columns[name] = pc.map_lookup(headers, name[len("headers.") :], "first")
        if "partition" in self.reads:
            columns["partition"] = pa.repeat(pa.scalar(partition, pa.int32()), table.num_rows)
        columns[ROW] = pa.array(np.arange(table.num_rows, dtype=np.int64))
        frame = pl.from_arrow(pa.table(columns))
        assert isinstance(frame, pl.DataFrame)
        return frame.lazy()

    def _table(self, table: pa.Table, rows: pl.DataFrame) -> pa.Table:
        """The output rows: what a step wrote from `rows`, the rest taken from `table`."""
        index = rows[ROW].to_arrow()
        whole = len(index) == table.num_rows  # steps only drop rows, never reorder them
        columns: dict[str, pa.Array | pa.ChunkedArray] = {}
        for name in ("payload", "offset", "key", "headers"):
            if name in self.writes and name in rows.columns:
                columns[name] = _written(name, rows[name])
            elif name in table.column_names:
                column = table.column(name)
                columns[name] = column if whole else column.take(index)
        return pa.table(columns)


def _written(name: str, series: pl.Series) -> pa.Array | pa.ChunkedArray:
    """A column a step wrote, as Tamto's batch type."""
    if name == "headers":
        return _headers(series)
    return series.cast(pl.Binary).to_arrow()


def compile_steps(steps: Sequence[Mapping[str, Any]], output: str) -> Pipeline:
    """The pipeline for `steps`, or `InvalidArgument` naming the bad step and why."""
    compiled: list[Step] = []
    projection: tuple[str, ...] | None = None
    route: Route | None = None
    window: WindowSpec | None = None
    reads: set[str] = set()
    writes: set[str] = set()
    for index, step in enumerate(steps):
        where = f"code.steps[{index}]"
        if not isinstance(step, Mapping) or len(step) != 1:
            raise InvalidArgument(f"{where}: a step is a mapping with one key (its kind)")
        ((kind, value),) = step.items()
        if route is not None or window is not None:
            raise InvalidArgument(f"{where}: 'route' and 'window' must be the last step")
        if kind == "route":
            route = _route(where, value)
            reads.update(route[0].meta.root_names())
        elif kind == "window":
            if projection is not None:
                raise InvalidArgument(f"{where}: a window's payload is its aggregates; no project")
            window = parse_window(where, value)
            reads.update(_window_reads(window))
        elif kind == "project":
            projection = _names(where, value)
            reads.update(projection)
            writes.add("payload")
        else:
            compiled.append(_step(where, kind, value, reads, writes))
    return Pipeline(
        tuple(compiled), projection, route, output, window, frozenset(reads), frozenset(writes)
    )


def _window_reads(window: WindowSpec) -> set[str]:
    names = {window.time, *window.key.meta.root_names()}
    for _, expr in window.aggregates.values():
        names.update(expr.meta.root_names())
    return names


def _step(where: str, kind: str, value: Any, reads: set[str], writes: set[str]) -> Step:
    """A step other than project, route and window; notes what it reads and writes."""
    if kind == "parse_json":
        step, fields = _parse_json(where, value)
        reads.add("payload")
        writes.update(set(fields) & {"payload", "key", "headers"})
        return step
    if kind == "filter":
        condition = expression(f"{where}.filter", value)
        reads.update(condition.meta.root_names())
        return lambda frame: frame.filter(condition)
    if kind == "set_key":
        key = expression(f"{where}.set_key", value)
        reads.update(key.meta.root_names())
        writes.add("key")
        return lambda frame: frame.with_columns(key.cast(pl.String).cast(pl.Binary).alias("key"))
    if kind == "set_headers":
        step, names = _set_headers(where, value)
        reads.update(names)
        writes.add("headers")
        return step
    raise InvalidArgument(
        f"{where}: unknown step {kind!r} (parse_json, filter, project, set_key, set_headers,"
        " route, window)"
    )


def _parse_json(where: str, value: Any) -> tuple[Step, list[str]]:
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
    parsed = pl.col("payload").cast(pl.String).str.json_decode(pl.Struct(schema)).struct.unnest()
    return (lambda frame: frame.with_columns(parsed)), list(schema)


def _set_headers(where: str, value: Any) -> tuple[Step, set[str]]:
    if not isinstance(value, Mapping) or not value:
        raise InvalidArgument(f"{where}.set_headers: a mapping of header name to expression")
    values = {
        str(name): expression(f"{where}.set_headers.{name}", text) for name, text in value.items()
    }
    added = pl.concat_list(
        [pl.struct(key=pl.lit(name), value=expr.cast(pl.String)) for name, expr in values.items()]
    )
    extended = (
        pl.when(pl.col("headers").is_null())
        .then(added)
        .otherwise(pl.concat_list([pl.col("headers"), added]))
    )

    def set_headers(frame: Frame) -> Frame:
        if "headers" in frame.collect_schema().names():
            return frame.with_columns(extended.alias("headers"))
        return frame.with_columns(added.alias("headers"))

    reads = {name for expr in values.values() for name in expr.meta.root_names()}
    return set_headers, reads


def _names(where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise InvalidArgument(f"{where}.project: a non-empty list of column names")
    return tuple(value)


def _route(where: str, value: Any) -> Route:
    if not isinstance(value, Mapping) or not isinstance(value.get("outputs"), Mapping):
        raise InvalidArgument(f"{where}.route: give 'by' and 'outputs' (value to stream)")
    by = expression(f"{where}.route.by", value.get("by"))
    outputs = {str(k): str(v) for k, v in value["outputs"].items()}
    if not outputs or not all(outputs.values()):
        raise InvalidArgument(f"{where}.route.outputs: map each value to a stream")
    default = value.get("default")
    return by, outputs, default


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
