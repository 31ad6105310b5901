"""How a gRPC channel notices that its peer stopped answering: one setting for every hop.

A network cut drops packets instead of refusing them, so a call in flight to a peer
behind the cut gets no error. It waits for its deadline (30 s in the SDK) or, once the
cut heals, for TCP's next retransmission, which backs off exponentially (0.2, 0.4,
0.8 ... s): a publish sent 7 s into a cut waited about 6 s more after the cut healed.

A channel therefore pings its peer every second while it has calls open and closes the
connection when a ping goes unanswered for a second. The calls on it fail with
UNAVAILABLE, which their callers retry elsewhere (the SDK's direct path through the
gateway, a gateway at the partition's new owner), and the next call dials a new
connection (`tamto_protocol.reconnect`). Pings are HTTP/2 frames answered by gRPC core,
not by the peer's Python event loop, so a busy peer still answers them in time; a
stopped or unreachable one does not. Servers accept a ping this often
(`tamto_common.channels.SERVER_OPTIONS`).

Every channel Tamto opens to a peer uses these options: the SDK's channels to the
gateway and to routers, and the services' channels to each other.
"""

from __future__ import annotations

#: A ping after this long without one, while calls are open (gRPC default: never).
KEEPALIVE_TIME_MS = 1_000
#: How long a ping may go unanswered before the connection is closed. gRPC core
#: (1.85) times the keep-alive ping by `grpc.http2.ping_timeout_ms` (default 60 s), not
#: only by `grpc.keepalive_timeout_ms` (default 20 s): the channel also sends pings of
#: its own (bandwidth probes) that reset the keep-alive timer, and those wait the ping
#: timeout. Both are set; with the keep-alive timeout alone, a call to a stopped peer
#: still waited out its deadline (`libs/common/tests/test_keepalive.py`).
KEEPALIVE_TIMEOUT_MS = 1_000

KEEPALIVE_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS),
)
