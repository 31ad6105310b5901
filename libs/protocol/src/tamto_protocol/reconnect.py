"""How fast a gRPC channel dials a peer again after losing it: one setting for every hop.

gRPC's defaults back a lost connection off from 1 s up to 120 s (1.6 times longer per
failed attempt, with jitter). While a channel waits out that backoff, every
call on it fails at once with UNAVAILABLE ("failed to connect to all
addresses ... Connection refused") even after the peer is serving again: a
gateway killed and restarted a few times left producers failing for 50-60 s.
Tamto's peers are few and known, so a channel waits at most a
quarter second (plus gRPC's 20 % jitter) between attempts, which bounds how
long a client or a service stays away from a peer that is back.
`min_reconnect_backoff_ms` is also the least time one attempt is given: 2 s,
so a handshake slowed by a loaded machine (or a peer resuming from SIGSTOP)
still completes instead of being abandoned and started over.

Every channel Tamto opens uses these options: the SDK's channel to the gateway
(and so the CLI's), the services' channels to each other
(`tamto_common.channels`), and their etcd client (`tamto_common.membership`).
"""

from __future__ import annotations

#: First backoff after a failed connection attempt (gRPC default: 1 s).
INITIAL_RECONNECT_BACKOFF_MS = 100
#: Longest backoff between connection attempts (gRPC default: 120 s).
MAX_RECONNECT_BACKOFF_MS = 250
#: The least time one connection attempt is given (gRPC default: 20 s).
MIN_RECONNECT_BACKOFF_MS = 2_000

RECONNECT_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.initial_reconnect_backoff_ms", INITIAL_RECONNECT_BACKOFF_MS),
    ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
    ("grpc.min_reconnect_backoff_ms", MIN_RECONNECT_BACKOFF_MS),
)
