"""Pipelines over Tamto streams: traffic report, dead-letter report, replay.

Each is a module with `run(spark, ...)` (what tests call) and `main(argv)`
(the command line), started by a thin script in the repository's `pipelines/`
directory, locally (`python pipelines/traffic_report.py ...`) or on a cluster
(`spark-submit pipelines/traffic_report.py ...`) with the same arguments.
"""
