"""The Spark source: a stream's messages as a DataFrame, read from the Parquet storage seals.

Every durable message lands in Parquet under storage's data directory
(`<data dir>/storage/streams/<stream>/partition=<p>/`, `.tamto/storage` for
`tamto up`). The `tamto` data source reads a stream there, with offset and time
ranges and as a streaming source with checkpoints; Spark can also read the same
files as plain Parquet. Storage seals new messages within seconds (5 s after
their ack by default), so this program waits until Spark sees all of them.

Run on the machine where storage keeps its data (the Spark package installed):
TAMTO_URL=... TAMTO_API_KEY=... TAMTO_STORAGE_DIR=.tamto/storage python examples/spark_source.py
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.functions import countDistinct

import tamto_sdk
from tamto_spark.session import spark_session

ORDERS = {"alice": 3, "bob": 2, "carol": 1}
SEALED_WITHIN_S = 60.0


def orders(spark: SparkSession, storage_dir: str, stream: str) -> DataFrame:
    """The stream's sealed messages through the `tamto` data source."""
    return spark.read.format("tamto").option("dataDir", storage_dir).option("stream", stream).load()


def wait_until_sealed(spark: SparkSession, storage_dir: str, stream: str, count: int) -> None:
    """Spark sees a message once storage sealed it: wait for all `count`."""
    deadline = time.monotonic() + SEALED_WITHIN_S
    while orders(spark, storage_dir, stream).count() < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"storage did not seal {count} messages in {SEALED_WITHIN_S} s")
        time.sleep(0.5)


async def main() -> None:
    url, key = os.environ["TAMTO_URL"], os.environ["TAMTO_API_KEY"]
    storage_dir = os.environ.get("TAMTO_STORAGE_DIR", ".tamto/storage")
    stream = f"example-orders-{uuid.uuid4().hex[:8]}"
    spark = spark_session("tamto-example-spark-source")
    async with tamto_sdk.connect(url, api_key=key) as client:
        await client.streams.ensure(stream, partitions=2)
        async with client.producer(stream) as producer:
            for customer, count in ORDERS.items():
                for n in range(count):
                    # Keyed by customer: one customer's orders stay in one partition, in order.
                    await producer.send(f"order {n} of {customer}".encode(), key=customer.encode())
        total = sum(ORDERS.values())
        await asyncio.to_thread(wait_until_sealed, spark, storage_dir, stream, total)
        frame = orders(spark, storage_dir, stream)
        per_key = {
            bytes(row["key"]).decode(): row["count"]
            for row in frame.groupBy("key").count().collect()
        }
        print(f"orders per customer, counted by Spark: {dict(sorted(per_key.items()))}")
        assert per_key == ORDERS
        spread = frame.groupBy("key").agg(countDistinct("partition").alias("partitions"))
        assert all(row["partitions"] == 1 for row in spread.collect()), "a key in one partition"
        await client.streams.delete(stream)
    print("ok")


if __name__ == "__main__":
    asyncio.run(main())
