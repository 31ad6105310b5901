"""Entry point for spark-submit and local runs: see tamto_spark.pipelines.traffic."""

import sys

from tamto_spark.pipelines.traffic import main

if __name__ == "__main__":
    sys.exit(main())
