"""Turn a run's JSON document into target verdicts, rich tables and Markdown tables.

`verdicts` judges the targets (and `finish` adds them to the document),
`summary` and `tables` make the rows of each table, `output` prints them or writes
them as Markdown, `values` reads and formats the document's numbers.
"""

from tamto_bench.report.output import markdown, render
from tamto_bench.report.summary import rows
from tamto_bench.report.tables import (
    cluster_rows,
    ephemeral_rows,
    freshness_rows,
    function_rows,
    mqtt_rows,
)
from tamto_bench.report.verdicts import Verdict, finish, ratios, replication_round_trip_ms, verdicts

__all__ = [
    "Verdict",
    "cluster_rows",
    "ephemeral_rows",
    "finish",
    "freshness_rows",
    "function_rows",
    "markdown",
    "mqtt_rows",
    "ratios",
    "render",
    "replication_round_trip_ms",
    "rows",
    "verdicts",
]
