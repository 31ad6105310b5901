"""A SparkSession for Tamto jobs: local by default, the cluster's under spark-submit.

`spark_session()` works the same in three places: `python pipelines/x.py`
(local Spark, `local[*]`), `spark-submit pipelines/x.py` (the master and
settings spark-submit gives) and tests (an existing session is reused). It
registers the `tamto` data source and makes Python workers run this
interpreter unless `PYSPARK_PYTHON` says otherwise.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from tamto_spark.datasource import register

LOCAL_MASTER = "local[*]"


def spark_session(app_name: str) -> SparkSession:
    """The active session, or a new one (local unless launched by spark-submit)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    active = SparkSession.getActiveSession()
    if active is not None:
        register(active)
        return active
    builder = SparkSession.builder.appName(app_name).config("spark.sql.session.timeZone", "UTC")
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit: run locally
        builder = builder.master(os.environ.get("TAMTO_SPARK_MASTER", LOCAL_MASTER))
        builder = builder.config("spark.ui.enabled", "false")
    spark = builder.getOrCreate()
    register(spark)
    return spark
