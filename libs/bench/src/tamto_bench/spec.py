"""What a benchmark job is asked to do and what it reports (both cross process boundaries)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class JobSpec:
    """One worker's part of a workload; pickled to the worker process.

    `system` is "tamto", "ephemeral" (Tamto's ephemeral streams), "jetstream",
    "core" (core NATS) or "ceiling"; `role` is "pub", "sub", "fan" (core NATS
    fan-out), "req" and "rep" (request/reply) or, for the ceiling, "client",
    "hop" and "sink". A publisher with
    `rate` > 0 paces itself (messages per second) and stamps each payload with its
    send time; a subscriber with `latency` reads those stamps.
    """

    system: str
    role: str
    target: str
    stream: str
    size: int
    duration_s: float
    api_key: str = ""
    rate: float = 0.0
    latency: bool = False
    linger_ms: float = 0.0
    window: int = 10_000
    credits: int = 5_000
    #: Tamto publishers: messages per `send_batch` call (0: one `send` per message).
    batch_api: int = 0
    idle_s: float = 1.0
    #: Ephemeral and fan-out subscribers: the group to join ("" none), and how many
    #: subscriptions one worker holds.
    group: str = ""
    subscribers: int = 1
    #: Ceiling: the port to serve on, the next hop's address, the file to write.
    port: int = 0
    path: str = ""


@dataclass
class JobResult:
    """What one worker measured.

    `in_window` counts messages completed (acked to the publisher, or received and
    acked by the consumer) inside the measurement window; `total` counts all of
    them. Times are wall-clock seconds (`time.time()`), comparable across the
    processes of one machine. `latencies_ns` holds publish→deliver latencies.
    """

    in_window: int = 0
    total: int = 0
    started: float = 0.0
    last: float = 0.0
    errors: int = 0
    latencies_ns: list[int] = field(default_factory=list)
