"""The processing service's settings, on top of every service's."""

from __future__ import annotations

import dataclasses

from tamto_common.config import ServiceConfig, positive, setting


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProcessingConfig(ServiceConfig):
    """Settings of a processing node."""

    gateway_url: str = setting(
        "", "gateway the functions publish and consume through (default: one from etcd)"
    )
    assign_interval_s: float = setting(
        1.0, "how often the node compares the functions it should run with those it runs", positive
    )
    restart_backoff_s: float = setting(
        2.0, "wait before restarting an instance that failed (doubles up to 30 s)", positive
    )
