"""Client-wide settings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ClientOptions"]


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """Settings shared by every call a `Client` makes.

    Attributes:
        retry_deadline_s: how long retriable failures (UNAVAILABLE, ...) are retried
            before the error is surfaced; applies to publishes, admin calls and
            consumer reconnects.
        retry_initial_backoff_s: cap of the first backoff between retries; doubles per
            attempt. Each backoff is a uniformly random time up to its cap (full jitter).
        retry_max_backoff_s: the largest cap of a single backoff: after a gateway comes
            back, a retrying call tries again within this long.
        rpc_timeout_s: deadline of one unary RPC attempt.
        token_refresh_margin_s: re-authenticate when the token expires within this margin.
        ack_linger_s: how long a consumer coalesces acks before sending them.
        tls: use a TLS channel (also implied by a ``tamtos://`` URL).
        root_certificates: PEM roots for TLS; None uses the system defaults.
        certificate_chain: PEM client certificate for a gateway that asks for one (mTLS).
        private_key: PEM private key of `certificate_chain`.
        channel_options: extra ``grpc.aio`` channel options.
        producer_name: written into the ``producer`` column of every batch.
        direct: producers publish straight to the router owning each partition, found
            with the gateway's ``Lookup`` (docs/cluster.md section 5), following it when
            it moves; through the gateway when routers advertise no client address or
            cannot be reached. Only batches whose every message has an id go directly
            (an idempotent producer's do). None (the default): `connect` reads the
            environment variable ``TAMTO_DIRECT`` (on unless ``0``, ``false``, ``no``
            or ``off``), so a
            deployment or ``tamto bench`` picks the path without code changes; the
            client's `options` then say which it took. On by default: a client that cannot
            reach routers, or one comparing the paths, sets it off (docs/benchmarks.md).

    The options read no environment themselves: `connect` is the one place the SDK
    does (docs/sdk.md, "Names").
    """

    retry_deadline_s: float = 30.0
    retry_initial_backoff_s: float = 0.05
    retry_max_backoff_s: float = 0.25
    rpc_timeout_s: float = 30.0
    token_refresh_margin_s: float = 30.0
    ack_linger_s: float = 0.01
    tls: bool = False
    root_certificates: bytes | None = None
    certificate_chain: bytes | None = None
    private_key: bytes | None = field(default=None, repr=False)
    channel_options: Sequence[tuple[str, Any]] = field(default_factory=tuple)
    producer_name: str | None = None
    direct: bool | None = None

    def __post_init__(self) -> None:
        if self.retry_deadline_s < 0:
            raise ValueError("retry_deadline_s must not be negative")
        if self.retry_initial_backoff_s <= 0 or self.retry_max_backoff_s <= 0:
            raise ValueError("backoffs must be positive")
        if self.rpc_timeout_s <= 0:
            raise ValueError("rpc_timeout_s must be positive")
