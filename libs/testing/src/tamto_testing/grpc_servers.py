"""A test's gRPC server listens on an address no other server of this process had.

gRPC shares one subchannel per address across every channel of a process. A port the
OS picks for `bind(0)` can come round again within one test worker; when a channel
an earlier test left open still points at that address, its subchannel is in backoff
after "connection refused", and a new channel to the new server inherits the failure
(UNAVAILABLE before any connection attempt). `tamto_local.ports.free_port` hands out
a port at most once per process, below the kernel's ephemeral range, so an address is
never reused within a worker.
"""

from __future__ import annotations

import grpc

from tamto_common.service import bind
from tamto_local.ports import free_port


def listen(server: grpc.aio.Server, host: str = "127.0.0.1") -> int:
    """Make `server` listen (without TLS) on `host` at a port new to this process: the port."""
    return bind(server, host, free_port(host))
