"""Router settings."""

from __future__ import annotations

from dataclasses import dataclass

from tamto_common.config import ServiceConfig, not_negative, positive, setting


@dataclass(frozen=True, kw_only=True)
class RouterConfig(ServiceConfig):
    read_batch_messages: int = setting(
        10_000, "most messages fetched from storage per read for delivery", positive
    )
    read_cache_mb: int = setting(
        128,
        "MiB of recently appended or read batches kept in memory for delivery (0: none)",
        not_negative,
    )
    cursor_commit_ms: int = setting(
        50,
        "most milliseconds a subscription's acks wait before their cursor is committed "
        "(commits are coalesced; a consumer's clean leave commits at once)",
        not_negative,
    )
    claim_timeout_s: float = setting(
        15.0, "how long a request waits for a partition's previous owner lease", positive
    )
