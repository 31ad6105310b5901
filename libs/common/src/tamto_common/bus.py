"""The internal bus (NATS): cluster events under `tamto.events.>`."""

from __future__ import annotations

import json
from typing import Any

import nats
from nats.aio.client import Client as NatsClient

from tamto_common.errors import Unavailable

EVENTS = "tamto.events"

#: Topic storage announces `{stream, partition, start_offset}` on after retention
#: removed or rewrote segments of a partition (docs/segments.md, "The readable range").
RANGE_SHRUNK = "partition.range_shrunk"


async def connect_bus(url: str, name: str, timeout_s: float = 10.0) -> NatsClient:
    """Connect to NATS, reconnecting forever once connected."""
    try:
        return await nats.connect(
            url,
            name=name,
            connect_timeout=timeout_s,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            allow_reconnect=True,
        )
    except Exception as exc:
        raise Unavailable(f"NATS at {url} not reachable: {exc}") from exc


async def publish_event(bus: NatsClient, topic: str, **fields: Any) -> None:
    """Publish a JSON event on `tamto.events.<topic>`."""
    await bus.publish(f"{EVENTS}.{topic}", json.dumps(fields).encode())
