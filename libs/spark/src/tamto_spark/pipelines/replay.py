"""Replay: republish a time or offset range of one stream into another, through the gateway.

    python pipelines/replay.py --data-dir .tamto/storage --stream orders --to orders-replay \\
        --url tamto://127.0.0.1:7400 --api-key KEY --start-time 2026-01-31T12:00:00Z

Keys, headers, event times and payloads are kept; each replayed message gets
the dedup id ``replay:<stream>:<partition>:<offset>``, so running the same
replay twice (or Spark retrying a task) does not publish a message twice
within the target's dedup window. The source position is added as headers
`tamto.replay.partition` and `tamto.replay.offset`. Prints a table of what
was replayed per source partition and writes it as Parquet under `--out`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from tamto_spark.pipelines.common import format_table, read_stream, write_parquet
from tamto_spark.session import spark_session


@dataclass(frozen=True)
class ReplaySummary:
    per_partition: list[dict[str, Any]]
    text: str


def run(
    spark: SparkSession,
    data_dir: str,
    stream: str,
    target: str,
    *,
    url: str,
    api_key: str,
    out_dir: str,
    starting_offsets: dict[int, int] | None = None,
    ending_offsets: dict[int, int] | None = None,
    start_time: str = "",
    end_time: str = "",
) -> ReplaySummary:
    source = read_stream(
        spark,
        data_dir,
        stream,
        startingOffsets=json.dumps(starting_offsets) if starting_offsets else "",
        endingOffsets=json.dumps(ending_offsets) if ending_offsets else "",
        startTime=start_time,
        endTime=end_time,
    )
    provenance = F.map_from_arrays(
        F.array(F.lit("tamto.replay.partition"), F.lit("tamto.replay.offset")),
        F.array(F.col("partition").cast("string"), F.col("offset").cast("string")),
    )
    headers = F.when(F.col("headers").isNull(), provenance).otherwise(
        F.map_concat(F.col("headers"), provenance)
    )
    rows = source.select(
        "key",
        "payload",
        headers.alias("headers"),
        "event_time",
        F.concat_ws(":", F.lit("replay"), F.lit(stream), "partition", "offset").alias("id"),
        "partition",
        "offset",
    ).cache()
    try:
        (
            rows.drop("partition", "offset")
            .write.format("tamto")
            .mode("append")
            .option("url", url)
            .option("apiKey", api_key)
            .save(target)
        )
        summary_df = (
            rows.groupBy("partition")
            .agg(
                F.count(F.lit(1)).alias("messages"),
                F.min("offset").alias("first_offset"),
                F.max("offset").alias("last_offset"),
            )
            .orderBy("partition")
        )
        write_parquet(summary_df, out_dir, "replayed")
        summary = [r.asDict() for r in summary_df.collect()]
    finally:
        rows.unpersist()
    text = format_table(
        f"Replayed {stream} -> {target}",
        ["partition", "messages", "first offset", "last offset"],
        [[r["partition"], r["messages"], r["first_offset"], r["last_offset"]] for r in summary],
    )
    return ReplaySummary(summary, text)


def _offsets(raw: str) -> dict[int, int] | None:
    return {int(p): int(o) for p, o in json.loads(raw).items()} if raw else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True, help="storage's data directory")
    parser.add_argument("--stream", required=True, help="the stream to replay from")
    parser.add_argument("--to", required=True, help="the stream to publish into")
    parser.add_argument("--url", required=True, help="the gateway: tamto://host:port")
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--out", required=True, help="directory for the Parquet summary")
    parser.add_argument("--starting-offsets", default="", help='JSON, e.g. {"0": 100}')
    parser.add_argument("--ending-offsets", default="", help="JSON, exclusive")
    parser.add_argument("--start-time", default="", help="ISO-8601 publish time, inclusive")
    parser.add_argument("--end-time", default="", help="ISO-8601 publish time, exclusive")
    args = parser.parse_args(argv)
    spark = spark_session("tamto-replay")
    summary = run(
        spark,
        args.data_dir,
        args.stream,
        args.to,
        url=args.url,
        api_key=args.api_key,
        out_dir=args.out,
        starting_offsets=_offsets(args.starting_offsets),
        ending_offsets=_offsets(args.ending_offsets),
        start_time=args.start_time,
        end_time=args.end_time,
    )
    print(summary.text, end="")
    return 0
