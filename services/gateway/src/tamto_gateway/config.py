"""Gateway settings."""

from __future__ import annotations

from dataclasses import dataclass

from tamto_common.config import ServiceConfig, positive, setting


@dataclass(frozen=True, kw_only=True)
class GatewayConfig(ServiceConfig):
    max_message_bytes: int = setting(1024 * 1024, "largest payload accepted, in bytes", positive)
    max_partitions: int = setting(1024, "most partitions a stream may have", positive)
    token_issuer: str = setting("tamto", "issuer expected in tokens")
    token_audience: str = setting("tamto", "audience expected in tokens")
    upstream_timeout_s: float = setting(30.0, "deadline for calls to routers and auth", positive)
