"""What a benchmark job is asked to do and what it reports (both cross process boundaries)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tamto_bench.timing import in_window


@dataclass(frozen=True)
class JobSpec:
    """One worker's part of a workload; pickled to the worker process.

    `system` is "tamto", "ephemeral" (Tamto's ephemeral streams), "http" (Tamto's
    HTTP API), "jetstream", "core" (core NATS) or "ceiling"; `role` is "pub", "sub",
    "fan" (core NATS fan-out), "req" and "rep" (request/reply), "ping" (one at a time), "seq"
    (sequential durable publish) and "iter" (per-message consuming) or, for the
    ceiling, "client",
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
    #: Tamto consumers' credit window (None: the SDK's default, as a newcomer's).
    credits: int | None = None
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
    #: HTTP publishers: the body of each request, "ndjson" or "arrow" (`http_jobs`).
    body: str = ""


@dataclass
class JobResult:
    """What one worker measured.

    `in_window` counts messages completed (acked to the publisher, or received and
    acked by the consumer) inside the measurement window; `total` counts all of
    them. Times are wall-clock seconds (`time.time()`), comparable across the
    processes of one machine. `latencies_ns` holds publish→deliver latencies;
    `deliver_side_ns`, of the same messages when the consumer knows when its router
    sequenced them (Tamto: the batch's publish time), the sequenced→deliver part.
    """

    in_window: int = 0
    total: int = 0
    started: float = 0.0
    last: float = 0.0
    errors: int = 0
    latencies_ns: list[int] = field(default_factory=list)
    deliver_side_ns: list[int] = field(default_factory=list)

    def record(
        self,
        count: int,
        counted: bool,
        sent_ns: Iterable[int] = (),
        received_ns: int = 0,
        warm_ns: int = 0,
        sequenced_ns: int = 0,
    ) -> None:
        """`count` messages received now, `counted` when inside the window; a latency
        sample for each send time in `sent_ns` at or after `warm_ns`, and with
        `sequenced_ns` (when the router sequenced them; 0: not known) a deliver-side
        sample for each as well."""
        self.total += count
        self.last = time.time()
        if counted:
            self.in_window += count
        samples = [received_ns - sent for sent in sent_ns if sent >= warm_ns]
        self.latencies_ns.extend(samples)
        if sequenced_ns and samples:
            self.deliver_side_ns.extend([received_ns - sequenced_ns] * len(samples))

    def ack_counter(
        self, start: float, end: float, count: int = 1
    ) -> Callable[[asyncio.Future[Any]], None]:
        """The done-callback of a publish of `count` messages: `count` errors if it failed,
        else `count` completed, in the window when it completes between the monotonic
        `start` and `end`."""

        def done(future: asyncio.Future[Any]) -> None:
            if future.cancelled() or future.exception() is not None:
                self.errors += count
                return
            self.total += count
            if in_window(start, end):
                self.in_window += count

        return done

    def timed_acks(
        self, start: float, end: float, warm_ns: int
    ) -> Callable[[int], Callable[[asyncio.Future[Any]], None]]:
        """`ack_counter` for single messages that also times them: called with a
        message's send time (wall-clock ns), it gives that publish's done-callback,
        which adds the send→ack time to `latencies_ns` when the message was sent at or
        after `warm_ns` and its publish succeeded."""
        done = self.ack_counter(start, end)

        def for_message(sent_ns: int) -> Callable[[asyncio.Future[Any]], None]:
            def timed(future: asyncio.Future[Any]) -> None:
                done(future)
                if sent_ns >= warm_ns and not future.cancelled() and future.exception() is None:
                    self.latencies_ns.append(time.time_ns() - sent_ns)

            return timed

        return for_message
