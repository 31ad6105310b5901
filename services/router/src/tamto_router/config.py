"""Router settings."""

from __future__ import annotations

from dataclasses import dataclass

from tamto_common.config import ServiceConfig, positive, setting


@dataclass(frozen=True, kw_only=True)
class RouterConfig(ServiceConfig):
    read_batch_messages: int = setting(
        10_000, "most messages fetched from storage per read for delivery", positive
    )
    claim_timeout_s: float = setting(
        15.0, "how long a request waits for a partition's previous owner lease", positive
    )
