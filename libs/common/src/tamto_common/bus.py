"""The internal bus (NATS): cluster events under `tamto.events.>`."""

from __future__ import annotations

import json
import time
from typing import Any

import nats
import structlog
from nats.aio.client import Client as NatsClient

from tamto_common.errors import Unavailable
from tamto_common.startup import LOG_EVERY_S
from tamto_protocol.reconnect import MAX_RECONNECT_BACKOFF_MS

log = structlog.get_logger(__name__)

EVENTS = "tamto.events"

#: Topic storage announces `{stream, partition, start_offset}` on after retention
#: removed or rewrote segments of a partition (docs/segments.md, "The readable range").
RANGE_SHRUNK = "partition.range_shrunk"

#: Topic a gateway announces `{stream, partitions}` on after deleting a stream's
#: definition; storage nodes then seal and close its partitions (`PartitionStore.release_stream`).
STREAM_DELETED = "stream.deleted"


async def connect_bus(url: str, name: str, timeout_s: float = 2.0) -> NatsClient:
    """Connect to NATS, trying again until it answers, and reconnecting forever once connected.

    Attempts follow the channels' reconnect policy (`tamto_protocol.reconnect`):
    one every 0.25 s while NATS refuses connections, and an attempt on a paused
    NATS is abandoned after `timeout_s`, so a service started while NATS is down
    connects within a fraction of a second of it answering (`tamto_common.startup`).
    A failing NATS is logged ("waiting for NATS") at most every `LOG_EVERY_S`.
    """
    logged = -LOG_EVERY_S
    connected = False

    async def on_error(exc: Exception) -> None:
        nonlocal logged
        now = time.monotonic()
        if now - logged >= LOG_EVERY_S:
            what = "NATS error" if connected else "waiting for NATS"
            log.warning(what, url=url, error=str(exc) or type(exc).__name__)
            logged = now

    try:
        bus = await nats.connect(
            url,
            name=name,
            connect_timeout=timeout_s,
            max_reconnect_attempts=-1,
            reconnect_time_wait=MAX_RECONNECT_BACKOFF_MS / 1000,
            allow_reconnect=True,
            error_cb=on_error,
        )
    except Exception as exc:
        raise Unavailable(f"NATS at {url} not reachable: {exc}") from exc
    connected = True
    return bus


async def publish_event(bus: NatsClient, topic: str, **fields: Any) -> None:
    """Publish a JSON event on `tamto.events.<topic>`."""
    await bus.publish(f"{EVENTS}.{topic}", json.dumps(fields).encode())
