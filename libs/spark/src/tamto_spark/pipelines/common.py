"""What the pipelines share: reading a stream, printing tables, writing outputs, charts."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession


def stream_path(data_dir: str, stream: str) -> str:
    """``<data-dir>/streams/<stream>``: storage's data directory layout (docs/segments.md)."""
    return str(Path(data_dir) / "streams" / stream)


def read_stream(spark: SparkSession, data_dir: str, stream: str, **options: str) -> DataFrame:
    """A stream's committed messages through the `tamto` data source (one manifest snapshot)."""
    reader = spark.read.format("tamto")
    for name, value in options.items():
        if value:
            reader = reader.option(name, value)
    return reader.load(stream_path(data_dir, stream))


def format_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table for the terminal."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    line = "  ".join("-" * w for w in widths)
    out = [title, line, "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)), line]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    if not cells:
        out.append("(none)")
    return "\n".join(out) + "\n"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode()
        except UnicodeDecodeError:
            return bytes(value).hex()
    return "" if value is None else str(value)


def write_parquet(frame: DataFrame, out_dir: str, name: str) -> str:
    """Write one output table as Parquet under `out_dir` (replacing an earlier run's)."""
    path = str(Path(out_dir) / name)
    frame.write.mode("overwrite").parquet(path)
    return path


class ChartsUnavailable(RuntimeError):
    """A chart was asked for, but matplotlib (the `charts` extra) is not installed."""


def pyplot() -> Any:
    """matplotlib.pyplot on the file-only Agg backend, for the pipelines' PNG charts.

    matplotlib is optional (`pip install 'tamto-spark[charts]'`); without it this raises
    ChartsUnavailable naming the extra (the pipelines' `--no-chart` needs none).
    """
    try:
        matplotlib = importlib.import_module("matplotlib")
    except ModuleNotFoundError as exc:
        if exc.name != "matplotlib":
            raise
        raise ChartsUnavailable(
            "charts need matplotlib: pip install 'tamto-spark[charts]' (or pass --no-chart)"
        ) from None
    matplotlib.use("Agg")
    return importlib.import_module("matplotlib.pyplot")


def save_chart(
    figure: Any, axes: Any, path: Path, title: str, x_label: str, y_label: str, *, dates: bool
) -> Path:
    """Title, label and legend a chart drawn on `axes`, write it to `path` as a PNG
    and free it; `dates`: the x axis is times, its labels slanted to fit."""
    axes.set_title(title)
    axes.set_xlabel(x_label)
    axes.set_ylabel(y_label)
    axes.legend()
    if dates:
        figure.autofmt_xdate()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100, bbox_inches="tight")
    pyplot().close(figure)
    return path


def report_parser(doc: str, stream_help: str) -> argparse.ArgumentParser:
    """The command line of a report pipeline (`doc`: its module docstring): where the
    stream is stored, which stream, where its outputs go, and `--no-chart`; a pipeline
    adds its own options before parsing with `parse_report_args`."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--data-dir", required=True, help="storage's data directory")
    parser.add_argument("--stream", required=True, help=stream_help)
    parser.add_argument("--out", required=True, help="directory for Parquet outputs and the chart")
    parser.add_argument(
        "--no-chart", action="store_true", help="no PNG chart (needs no matplotlib)"
    )
    return parser


def parse_report_args(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> argparse.Namespace:
    """`argv` parsed; exits with the parser's usage error if a chart is wanted and
    matplotlib is missing, before Spark starts."""
    args = parser.parse_args(argv)
    if not args.no_chart:
        try:
            pyplot()
        except ChartsUnavailable as exc:
            parser.error(str(exc))
    return args


def print_report(text: str, chart: Path | None) -> int:
    """Print a report's tables, and where its chart went; the command's exit status."""
    print(text, end="")
    if chart is not None:
        print(f"chart: {chart}")
    return 0
