"""Entry point for spark-submit and local runs: see tamto_spark.pipelines.dead_letters."""

import sys

from tamto_spark.pipelines.dead_letters import main

if __name__ == "__main__":
    sys.exit(main())
