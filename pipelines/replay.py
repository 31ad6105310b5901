"""Entry point for spark-submit and local runs: see tamto_spark.pipelines.replay."""

import sys

from tamto_spark.pipelines.replay import main

if __name__ == "__main__":
    sys.exit(main())
