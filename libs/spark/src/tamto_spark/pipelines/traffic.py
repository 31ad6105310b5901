"""Traffic report: messages and bytes per minute per partition, top keys, latency percentiles.

    python pipelines/traffic_report.py --data-dir .tamto/storage --stream orders --out out/traffic

Outputs under `--out`: `per_minute/`, `top_keys/`, `latency/` (Parquet) and
`traffic.png` (messages per minute per partition); the same tables are printed.
Latency is publish time minus event time, for messages that carry an event time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tamto_spark.pipelines.common import (
    format_table,
    parse_report_args,
    print_report,
    pyplot,
    read_stream,
    report_parser,
    save_chart,
    write_parquet,
)
from tamto_spark.session import spark_session

PERCENTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class TrafficReport:
    """The report's tables as rows, and where they were written."""

    per_minute: list[dict[str, Any]]
    top_keys: list[dict[str, Any]]
    latency: dict[str, Any]
    chart: Path | None
    text: str


def per_minute(messages: DataFrame) -> DataFrame:
    size = F.length("payload") + F.coalesce(F.length("key"), F.lit(0))
    return (
        messages.groupBy("partition", F.date_trunc("minute", "publish_time").alias("minute"))
        .agg(F.count(F.lit(1)).alias("messages"), F.sum(size).alias("bytes"))
        .orderBy("minute", "partition")
    )


def top_keys(messages: DataFrame, limit: int) -> DataFrame:
    return (
        messages.where(F.col("key").isNotNull())
        .groupBy(F.col("key").cast("string").alias("key"))
        .agg(F.count(F.lit(1)).alias("messages"))
        .orderBy(F.desc("messages"), "key")
        .limit(limit)
    )


def latency(messages: DataFrame) -> DataFrame:
    millis = (F.unix_micros("publish_time") - F.unix_micros("event_time")) / 1000.0
    timed = messages.where(F.col("event_time").isNotNull()).select(millis.alias("ms"))
    quantiles = F.percentile_approx("ms", list(PERCENTILES), 10_000)
    return timed.agg(
        F.count(F.lit(1)).alias("messages"),
        *(quantiles[i].alias(f"p{int(p * 100)}_ms") for i, p in enumerate(PERCENTILES)),
        F.max("ms").alias("max_ms"),
    )


def run(
    spark: SparkSession,
    data_dir: str,
    stream: str,
    out_dir: str,
    *,
    top: int = 10,
    start_time: str = "",
    end_time: str = "",
    chart: bool = True,
) -> TrafficReport:
    """Compute, write and render the report (and its PNG chart unless `chart` is False:
    the chart needs matplotlib, the `charts` extra)."""
    messages = read_stream(spark, data_dir, stream, startTime=start_time, endTime=end_time)
    messages = messages.cache()
    try:
        minutes_df, keys_df, latency_df = (
            per_minute(messages),
            top_keys(messages, top),
            latency(messages),
        )
        write_parquet(minutes_df, out_dir, "per_minute")
        write_parquet(keys_df, out_dir, "top_keys")
        write_parquet(latency_df, out_dir, "latency")
        minutes = [r.asDict() for r in minutes_df.collect()]
        keys = [r.asDict() for r in keys_df.collect()]
        lat = latency_df.collect()[0].asDict()
    finally:
        messages.unpersist()
    text = (
        format_table(
            f"Traffic of {stream}: per minute and partition",
            ["minute", "partition", "messages", "bytes"],
            [[r["minute"], r["partition"], r["messages"], r["bytes"]] for r in minutes],
        )
        + format_table(
            f"Top {top} keys", ["key", "messages"], [[r["key"], r["messages"]] for r in keys]
        )
        + format_table(
            "Publish minus event time (ms)",
            list(lat),
            [list(lat.values())],
        )
    )
    png = _chart(minutes, Path(out_dir) / "traffic.png", stream) if chart and minutes else None
    return TrafficReport(minutes, keys, lat, png, text)


def _chart(minutes: list[dict[str, Any]], path: Path, stream: str) -> Path:
    plt = pyplot()

    figure, axes = plt.subplots(figsize=(8, 4))
    for partition in sorted({r["partition"] for r in minutes}):
        rows = [r for r in minutes if r["partition"] == partition]
        axes.plot(
            [r["minute"] for r in rows],
            [r["messages"] for r in rows],
            marker="o",
            label=f"partition {partition}",
        )
    title = f"{stream}: messages per minute"
    return save_chart(figure, axes, path, title, "minute (UTC)", "messages", dates=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = report_parser(__doc__, "the stream whose traffic to report")
    parser.add_argument("--top", type=int, default=10, help="how many keys to list")
    parser.add_argument("--start-time", default="", help="ISO-8601 publish time to start at")
    parser.add_argument("--end-time", default="", help="ISO-8601 publish time to stop before")
    args = parse_report_args(parser, argv)
    spark = spark_session("tamto-traffic-report")
    report = run(
        spark,
        args.data_dir,
        args.stream,
        args.out,
        top=args.top,
        start_time=args.start_time,
        end_time=args.end_time,
        chart=not args.no_chart,
    )
    return print_report(report.text, report.chart)
