"""The replicas this router is healing, as a metric `tamto status` reads.

`tamto_router_under_replicated_ledgers` counts ledgers; an operator also wants to
know which partition heals which replica and why (caught up after a restart, or a
spare filled in place of a node that stayed down). The gauge
`tamto_router_healing_replicas{stream,partition,replica,reason}` is 1 for each
such replica of a partition this router has open, computed on each scrape from the
open logs (`Partitions.healing`), so a healed replica's series disappears.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

HEALING_METRIC = "tamto_router_healing_replicas"

#: (stream, partition) -> replica -> why it takes no appends yet.
HealingSource = Callable[[], Mapping[tuple[str, int], Mapping[str, str]]]


class HealingReplicas:
    """A collector over `source` (set once the router's partitions exist)."""

    def __init__(self) -> None:
        self.source: HealingSource = dict

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            HEALING_METRIC,
            "Replicas of this router's open partitions being caught up or re-replicated "
            "(1 each; reason says which, and the last failed try)",
            labels=["stream", "partition", "replica", "reason"],
        )
        for (stream, partition), nodes in sorted(self.source().items()):
            for node, reason in sorted(nodes.items()):
                family.add_metric([stream, str(partition), node, reason], 1)
        yield family


HEALING = HealingReplicas()
REGISTRY.register(HEALING)
