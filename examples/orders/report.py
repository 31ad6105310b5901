"""The order pipeline's Spark report: revenue per region per window over the streams' Parquet.

Spark reads the enriched orders and the `revenue` function's windows where storage
sealed them (the `tamto` data source), recomputes revenue per region per window from
the enriched orders, checks each customer's orders kept their order, and draws the
function's windows as a PNG chart. Heavier questions (joins over history, months of
data) belong here rather than in a processing function.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import Streams
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from tamto_spark.pipelines.common import format_table, pyplot, read_stream, save_chart
from tamto_spark.session import spark_session

SEALED_WITHIN_S = 60.0

ENRICHED = StructType(
    [
        StructField("customer", StringType()),
        StructField("region", StringType()),
        StructField("seq", LongType()),
        StructField("total", DoubleType()),
    ]
)
REVENUE = StructType(
    [
        StructField("window_start_us", LongType()),
        StructField("key", StringType()),
        StructField("revenue", DoubleType()),
        StructField("orders", LongType()),
    ]
)


@dataclass(frozen=True, slots=True)
class Report:
    """What the report found: per (window start µs, region), revenue and orders."""

    from_function: dict[tuple[int, str], tuple[float, int]]
    from_orders: dict[tuple[int, str], tuple[float, int]]
    customers_out_of_order: int
    chart: Path | None
    text: str


def count(spark: SparkSession, storage_dir: str, stream: str) -> int:
    """Messages of `stream` Spark sees (storage seals within seconds of the ack)."""
    return read_stream(spark, storage_dir, stream).count()


def _json(frame: DataFrame, schema: StructType) -> DataFrame:
    parsed = F.from_json(F.col("payload").cast("string"), schema).alias("o")
    return frame.select("partition", "offset", "publish_time", parsed).select(
        "partition", "offset", "publish_time", "o.*"
    )


def revenue_report(
    spark: SparkSession,
    storage_dir: str,
    enriched: str,
    revenue: str,
    window_s: int,
    chart_path: Path | None,
) -> Report:
    orders = _json(read_stream(spark, storage_dir, enriched), ENRICHED)
    size_us = window_s * 1_000_000
    start = (F.floor(F.unix_micros("publish_time") / size_us) * size_us).cast("long")
    per_window = orders.groupBy(start.alias("window_start_us"), "region").agg(
        F.round(F.sum("total"), 2).alias("revenue"), F.count("*").alias("orders")
    )
    from_orders = {
        (r["window_start_us"], r["region"]): (r["revenue"], r["orders"])
        for r in per_window.collect()
    }
    windows = _json(read_stream(spark, storage_dir, revenue), REVENUE)
    from_function = {
        (r["window_start_us"], r["key"]): (round(r["revenue"], 2), r["orders"])
        for r in windows.collect()
    }
    by_customer = Window.partitionBy("customer").orderBy("partition", "offset")
    checked = orders.withColumn("previous", F.lag("seq").over(by_customer))
    out_of_order = checked.where(F.col("previous") >= F.col("seq")).count()
    rows = [
        [_minute(s), region, *from_function[(s, region)]] for s, region in sorted(from_function)
    ]
    text = format_table(
        f"Revenue per region per {window_s} s window (from the revenue function)",
        ["window start (UTC)", "region", "revenue", "orders"],
        rows,
    )
    chart = _chart(from_function, chart_path, window_s) if chart_path and from_function else None
    return Report(from_function, from_orders, out_of_order, chart, text)


def _minute(start_us: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(start_us / 1e6, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _chart(windows: dict[tuple[int, str], tuple[float, int]], path: Path, window_s: int) -> Path:
    plt = pyplot()
    starts = sorted({s for s, _ in windows})
    regions = sorted({r for _, r in windows})
    figure, axes = plt.subplots(figsize=(8, 4))
    bottom = [0.0] * len(starts)
    labels = [_minute(s)[11:] for s in starts]
    for region in regions:
        values: list[Any] = [windows.get((s, region), (0.0, 0))[0] for s in starts]
        axes.bar(labels, values, bottom=bottom, label=region)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    title = f"Revenue per region per {window_s} s window"
    return save_chart(
        figure, axes, path, title, "window start (UTC)", "revenue (with tax)", dates=True
    )


def agree(report: Report) -> bool:
    """The function's windows and Spark's recount hold the same orders and revenue."""
    if report.from_function.keys() != report.from_orders.keys():
        return False
    return all(
        abs(revenue - report.from_orders[slot][0]) < 0.01 and orders == report.from_orders[slot][1]
        for slot, (revenue, orders) in report.from_function.items()
    )


def spark_report(
    streams: Streams, storage_dir: str, window_s: int, out: Path, valid: int
) -> Report:
    """Wait until Spark sees every enriched order, report, and check the pipeline's output."""
    spark = spark_session("tamto-orders-report")
    deadline = time.monotonic() + SEALED_WITHIN_S
    while count(spark, storage_dir, streams.enriched) < valid:
        if time.monotonic() > deadline:
            raise TimeoutError(f"storage did not seal {valid} orders in {SEALED_WITHIN_S} s")
        time.sleep(0.5)
    report = revenue_report(
        spark, storage_dir, streams.enriched, streams.revenue, window_s, out / "revenue.png"
    )
    print(report.text, end="")
    print(f"chart: {report.chart}")
    assert agree(report), "the revenue windows and Spark's recount differ"
    assert report.customers_out_of_order == 0, "a customer's orders out of order"
    return report
