"""Which of gRPC's I/O stacks a service process runs on: chosen before grpc is imported.

gRPC Python (1.85, the locked version) reads `GRPC_EXPERIMENTS` once, when the
`grpc` package is first imported. By default its sockets are served by the
EventEngine: a pool of threads of its own reads and writes them and posts each
completion to the completion queue that grpc.aio's poller thread waits on, which
in turn wakes the event loop. With the EventEngine's client, listener and
other endpoints turned off, gRPC's older I/O manager polls the sockets on that
poller thread itself: one thread wake-up fewer for every message a stream sends
or receives, and every Tamto hop sends and receives a few per published batch.

Measured on the 2-core build machine (docs/benchmarks.md, issue 22, session 6):
a bare grpc.aio stream ping-pong in one process 0.32-0.35 → 0.25-0.27 ms of CPU
per round trip; `send_and_wait` one at a time through gateway, router and
storage 9-14% less CPU per message in those three services, alternating with
the previous setting on two local Tamtos side by side.

So every service's `__main__` calls `use_polling_io()` before anything imports
grpc. An operator's own `GRPC_EXPERIMENTS` is kept as it is (setting it to an
empty string gives gRPC's defaults back).
"""

from __future__ import annotations

import os
import sys

#: What the services set `GRPC_EXPERIMENTS` to unless the environment has it already.
POLLING_IO_EXPERIMENTS = (
    "-event_engine_client,-event_engine_listener,-event_engine_for_all_other_endpoints"
)


def use_polling_io() -> bool:
    """Turn the EventEngine's endpoints off for this process (module docstring).

    Returns False, changing nothing, when it is too late (grpc already imported)
    or the environment chose already; True when it set `GRPC_EXPERIMENTS`."""
    if "grpc" in sys.modules or "GRPC_EXPERIMENTS" in os.environ:
        return False
    os.environ["GRPC_EXPERIMENTS"] = POLLING_IO_EXPERIMENTS
    return True
