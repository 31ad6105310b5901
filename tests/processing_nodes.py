"""A processing node for the tests of functions: started on a test cluster when a
module asks, tuned to assign and restart instances within a fraction of a second."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tamto_testing.cluster import TestCluster

#: Assignment rounds and restarts of failed instances every 0.2 s (defaults: seconds).
FAST = {"TAMTO_PROCESSING_ASSIGN_INTERVAL_S": "0.2", "TAMTO_PROCESSING_RESTART_BACKOFF_S": "0.2"}


@contextlib.contextmanager
def processing_node(cluster: TestCluster) -> Iterator[TestCluster]:
    """`cluster` with its processing node running (`FAST`), stopped again on exit."""
    cluster.start("processing", extra_env=FAST)
    try:
        yield cluster
    finally:
        cluster.stop("processing")
