"""Dead-letter report: why and where messages died, by delivery count.

    python pipelines/dead_letter_report.py --data-dir .tamto/storage --stream orders --out out/dlq

Reads the stream's dead-letter stream (`<stream>.dlq` unless `--dlq-stream`
says otherwise). A dead letter carries where it died in headers (see
docs/segments.md): `tamto.dlq.reason`, `tamto.dlq.stream`,
`tamto.dlq.partition`, `tamto.dlq.offset`,
`tamto.dlq.subscription`, `tamto.dlq.delivery_count`. Outputs `by_reason/`,
`by_delivery_count/` (Parquet), `dead_letters.png`, and the tables printed.
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

REASON = "tamto.dlq.reason"
SOURCE_STREAM = "tamto.dlq.stream"
SOURCE_PARTITION = "tamto.dlq.partition"
SOURCE_OFFSET = "tamto.dlq.offset"
SUBSCRIPTION = "tamto.dlq.subscription"
DELIVERY_COUNT = "tamto.dlq.delivery_count"


@dataclass(frozen=True)
class DeadLetterReport:
    by_reason: list[dict[str, Any]]
    by_delivery_count: list[dict[str, Any]]
    chart: Path | None
    text: str


def dead_letters(messages: DataFrame) -> DataFrame:
    """One row per dead letter with its provenance pulled out of the headers."""
    header = F.col("headers")
    return messages.select(
        F.coalesce(header[REASON], F.lit("unknown")).alias("reason"),
        header[SOURCE_STREAM].alias("source_stream"),
        header[SOURCE_PARTITION].cast("int").alias("source_partition"),
        header[SOURCE_OFFSET].cast("long").alias("source_offset"),
        header[SUBSCRIPTION].alias("subscription"),
        header[DELIVERY_COUNT].cast("int").alias("delivery_count"),
        "publish_time",
    )


def run(
    spark: SparkSession, data_dir: str, dlq_stream: str, out_dir: str, *, chart: bool = True
) -> DeadLetterReport:
    """Compute, write and render the report (and its PNG chart unless `chart` is False:
    the chart needs matplotlib, the `charts` extra)."""
    letters = dead_letters(read_stream(spark, data_dir, dlq_stream)).cache()
    try:
        by_reason_df = (
            letters.groupBy("reason", "source_stream", "source_partition", "subscription")
            .agg(
                F.count(F.lit(1)).alias("messages"),
                F.min("source_offset").alias("first_offset"),
                F.max("source_offset").alias("last_offset"),
                F.max("publish_time").alias("last_died"),
            )
            .orderBy(F.desc("messages"), "reason", "source_partition")
        )
        by_count_df = (
            letters.groupBy("delivery_count", "reason")
            .agg(F.count(F.lit(1)).alias("messages"))
            .orderBy("delivery_count", "reason")
        )
        write_parquet(by_reason_df, out_dir, "by_reason")
        write_parquet(by_count_df, out_dir, "by_delivery_count")
        by_reason = [r.asDict() for r in by_reason_df.collect()]
        by_count = [r.asDict() for r in by_count_df.collect()]
    finally:
        letters.unpersist()
    text = format_table(
        f"Dead letters in {dlq_stream}: why and where",
        ["reason", "stream", "partition", "subscription", "messages", "offsets"],
        [
            [
                r["reason"],
                r["source_stream"],
                r["source_partition"],
                r["subscription"],
                r["messages"],
                f"{r['first_offset']}-{r['last_offset']}",
            ]
            for r in by_reason
        ],
    ) + format_table(
        "By delivery count",
        ["deliveries", "reason", "messages"],
        [[r["delivery_count"], r["reason"], r["messages"]] for r in by_count],
    )
    png = (
        _chart(by_count, Path(out_dir) / "dead_letters.png", dlq_stream)
        if chart and by_count
        else None
    )
    return DeadLetterReport(by_reason, by_count, png, text)


def _chart(rows: list[dict[str, Any]], path: Path, stream: str) -> Path:
    plt = pyplot()

    reasons = sorted({r["reason"] for r in rows})
    counts = sorted({r["delivery_count"] for r in rows if r["delivery_count"] is not None})
    figure, axes = plt.subplots(figsize=(8, 4))
    bottom = [0] * len(counts)
    for reason in reasons:
        heights = [
            sum(r["messages"] for r in rows if r["reason"] == reason and r["delivery_count"] == c)
            for c in counts
        ]
        axes.bar([str(c) for c in counts], heights, bottom=bottom, label=reason)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    return save_chart(
        figure,
        axes,
        path,
        f"{stream}: dead letters by delivery count",
        "deliveries before dead-lettering",
        "messages",
        dates=False,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = report_parser(__doc__, "the stream whose dead letters to report")
    parser.add_argument("--dlq-stream", default="", help="default: <stream>.dlq")
    args = parse_report_args(parser, argv)
    spark = spark_session("tamto-dead-letter-report")
    dlq = args.dlq_stream or f"{args.stream}.dlq"
    report = run(spark, args.data_dir, dlq, args.out, chart=not args.no_chart)
    return print_report(report.text, report.chart)
