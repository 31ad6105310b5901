"""The Spark blocks of the docs (tests/doc_blocks.py `SPARK_BLOCKS`) run on a real stream.

They run in this process on the test run's one SparkSession, with `spark` and `key` (the
cluster's API key) defined, the docs' `.tamto/storage` and `<data-dir>` as the fast-sealing
cluster's data directory and its URL for the local one; the blocks of one page share their
names, as a reader's session would.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

import tamto_sdk
from tamto_spark.datasource import register
from tamto_testing.cluster import TestCluster
from tamto_testing.waiting import eventually
from tests.doc_blocks import DOC_URL, SPARK_BLOCKS, Block, code_blocks

from .conftest import data_dir, stream_dir, wait_sealed


def spark_blocks() -> list[Block]:
    found = [b for b in code_blocks() if b.key in SPARK_BLOCKS]
    assert sorted(b.key for b in found) == sorted(SPARK_BLOCKS), "a Spark block is gone"
    return found


async def test_the_docs_spark_blocks_run(
    spark: SparkSession, client: tamto_sdk.Client, sealing_cluster: TestCluster
) -> None:
    # as a reader's session has it (tamto_spark.session), in the thread running the blocks
    register(spark)
    await client.streams.ensure("orders", partitions=1)
    await client.streams.ensure("orders-copy", partitions=1)
    async with client.producer("orders") as producer:
        acked = [await producer.send_and_wait(b"order %d" % i, key=b"k") for i in range(300)]
    wait_sealed(stream_dir(sealing_cluster, "orders"), {0: len(acked)})
    storage = str(data_dir(sealing_cluster))
    pages: dict[str, dict[str, Any]] = {}
    for block in spark_blocks():
        names = pages.setdefault(block.page, {"spark": spark, "key": sealing_cluster.credential})
        text = (
            block.text.replace(".tamto/storage", storage)
            .replace("<data-dir>", storage)
            .replace(DOC_URL, sealing_cluster.url)
        )
        exec(compile(text, f"{block.page}:{block.line}", "exec"), names)
    # docs/spark.md read the stream into `df` and wrote its rows back to it.
    assert pages["docs/spark.md"]["df"].count() == len(acked)

    # docs/spark.md then wrote df's rows to another stream.
    ends: list[int] = []

    async def written_back() -> bool:
        stats = await client.streams.stats("orders-copy")
        ends.append(sum(p.end_offset for p in stats.partitions))
        return ends[-1] == len(acked)

    try:
        await eventually(written_back, 30, "the rows written to orders-copy")
    except AssertionError:
        raise AssertionError(f"orders-copy ends at {ends[-1]}, not {len(acked)}") from None
