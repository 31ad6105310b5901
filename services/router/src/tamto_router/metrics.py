"""Prometheus metrics of the router's data path (registered once, on import).

Label sets stay bounded: messages and bytes are counted per stream and direction
(`in`: appended through this router, acked durable; `out`: handed to consumers,
redeliveries included), not per partition (`tamto stream stats` shows a
partition's figures), so a router with P partitions over S streams exports 4·S
series here, whatever P is. Ownership changes are counted per kind of change.
The per-subscription figures are `tamto_router.subscription_metrics`'.
"""

from __future__ import annotations

import time

from prometheus_client import Counter, Histogram

STREAM_MESSAGES = Counter(
    "tamto_router_stream_messages",
    "Messages through this router per stream: in = appended (acked durable), "
    "out = delivered to consumers (redeliveries included)",
    ["stream", "direction"],
)
STREAM_BYTES = Counter(
    "tamto_router_stream_bytes",
    "Arrow IPC bytes through this router per stream (directions as tamto_router_stream_messages)",
    ["stream", "direction"],
)
PUBLISH_TO_DELIVER_SECONDS = Histogram(
    "tamto_router_publish_to_deliver_seconds",
    "From a batch's publish time (the router's clock when it was sequenced) to its first "
    "delivery to a consumer",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 60, 600),
)
PUBLISH_ACK_SECONDS = Histogram(
    "tamto_router_publish_ack_seconds",
    "From a client's direct publish reaching the router to its ack (durable on the "
    "partition's quorum), one observation per batch, pipelined calls included; the "
    "gateway's path is tamto_gateway_publish_ack_seconds (the same buckets)",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
)
OWNERSHIP_CHANGES = Counter(
    "tamto_router_ownership_changes",
    "Partition ownership changes on this router: claimed (opened here), handed_back "
    "(another router's by placement now), lost (the ownership lease lapsed)",
    ["change"],
)
for _change in ("claimed", "handed_back", "lost"):  # every series from the start, at 0
    OWNERSHIP_CHANGES.labels(_change)


#: The (messages, bytes) counter children by (stream, direction), looked up once each:
#: `labels` takes a lock and builds a key on every call, and these count every batch.
_CHILDREN: dict[tuple[str, str], tuple[Counter, Counter]] = {}


def _children(stream: str, direction: str) -> tuple[Counter, Counter]:
    found = _CHILDREN.get((stream, direction))
    if found is None:
        found = _CHILDREN[(stream, direction)] = (
            STREAM_MESSAGES.labels(stream, direction),
            STREAM_BYTES.labels(stream, direction),
        )
    return found


def count_in(stream: str, messages: int, size: int) -> None:
    """A batch of `messages` (`size` bytes) appended durably to a partition of `stream`."""
    counted, sized = _children(stream, "in")
    counted.inc(messages)
    sized.inc(size)


def count_out(stream: str, messages: int, size: int, publish_time_us: int, first: bool) -> None:
    """A piece delivered to a consumer; `first`: its first delivery (latency observed)."""
    counted, sized = _children(stream, "out")
    counted.inc(messages)
    sized.inc(size)
    if first and publish_time_us > 0:
        PUBLISH_TO_DELIVER_SECONDS.observe(max(0.0, time.time() - publish_time_us / 1e6))
