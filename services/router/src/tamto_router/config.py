"""Router settings."""

from __future__ import annotations

from dataclasses import dataclass

from tamto_common.config import ServiceConfig, not_negative, positive, setting
from tamto_common.errors import ConfigError
from tamto_common.oidc import oidc_issuers_file_setting
from tamto_router.balancer import BalanceSettings
from tamto_router.replica_catch_up import REREPLICATE_AFTER_S
from tamto_router.subscription_metrics import DEFAULT_LIMIT


@dataclass(frozen=True, kw_only=True)
class RouterConfig(ServiceConfig):
    read_batch_messages: int = setting(
        10_000, "most messages fetched from storage per read for delivery", positive
    )
    # Big enough that a consumer a few seconds behind at a couple of hundred MB/s
    # is served from memory (Pulsar's broker cache is ~800 MiB with its stock
    # memory settings); 128 MiB sent a 1 KiB drain of a 5 s backlog to storage at
    # about half the rate in `tamto bench`'s consume+ack.
    read_cache_mb: int = setting(
        1024,
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
        0.0,
        "how long a request waits for a partition's previous owner's lease to lapse "
        "(0: three lease TTLs, 15 s with the default --lease-ttl-s 5; more than one TTL)",
        not_negative,
    )
    max_consumers_per_subscription: int = setting(
        20_000,
        "most consumers attached at once to one subscription on one partition; more are "
        "refused with RESOURCE_EXHAUSTED (0: no limit)",
        not_negative,
    )
    client_address: str = setting(
        "auto",
        "host:port clients publish to directly, advertised in this router's membership "
        "record (docs/cluster.md section 5): auto = the address peers dial; none = clients "
        "go through a gateway",
    )
    client_port: int = setting(
        0,
        "with TLS: the port clients' direct calls are served on, over TLS that asks for no "
        "client certificate (--port requires one: mTLS between services); 0: a free port. "
        "Without TLS clients are served on --port",
        not_negative,
    )
    max_message_bytes: int = setting(
        1024 * 1024,
        "largest message (payload, key, headers and id) a client may publish directly, "
        "in bytes (the gateway's)",
        positive,
    )
    token_issuer: str = setting("tamto", "issuer expected in client tokens (as the gateway's)")
    token_audience: str = setting("tamto", "audience expected in client tokens")
    oidc_issuers_file: str = oidc_issuers_file_setting()
    policy_refresh_s: float = setting(
        30.0, "reload the security policy this often even without a bus event (seconds)", positive
    )

    load_report_interval_s: float = setting(
        5.0,
        "seconds between this router's load reports on tamto.events.load, which the "
        "elected balancer decides on (0: no reports, no balancing by this router)",
        not_negative,
    )
    balance_threshold: float = setting(
        2.0,
        "the balancer moves a partition when the busiest router's load is more than this "
        "many times the idlest's",
        positive,
    )
    balance_min_load: float = setting(
        1000.0,
        "... and at least this load (messages per second, plus bytes per second per KiB)",
        not_negative,
    )
    balance_cooldown_s: float = setting(
        60.0,
        "no balancing move for this long after one, or after becoming the balancer",
        not_negative,
    )
    subscription_metrics_s: float = setting(
        15.0,
        "seconds between samples of the per-subscription metrics (backlog, unacked, "
        "redeliveries, ... of the partitions this router owns; 0: not exported)",
        not_negative,
    )
    subscription_metrics_limit: int = setting(
        DEFAULT_LIMIT,
        "most subscriptions exported by name, those with the largest backlog; the rest "
        'are summed into one stream="_other" row (the bound on those series)',
        positive,
    )
    rereplicate_after_s: float = setting(
        REREPLICATE_AFTER_S,
        "seconds a storage node stays unregistered before the partitions it holds are "
        "copied to a spare node (re-replication; a restart usually registers again within it)",
        positive,
    )

    def __post_init__(self) -> None:
        if self.claim_timeout_s and self.claim_timeout_s <= self.lease_ttl_s:
            raise ConfigError(
                "--claim-timeout-s / TAMTO_ROUTER_CLAIM_TIMEOUT_S",
                f"must be more than the lease TTL ({self.lease_ttl_s} s), got "
                f"{self.claim_timeout_s:g}: a request would give up before the previous "
                "owner's lease could lapse",
            )

    @property
    def claim_timeout(self) -> float:
        """Seconds a request waits for a partition's previous owner's lease to lapse."""
        return self.claim_timeout_s or 3.0 * self.lease_ttl_s

    def balance_settings(self) -> BalanceSettings:
        return BalanceSettings(
            self.balance_threshold,
            self.balance_min_load,
            self.balance_cooldown_s,
            self.load_report_interval_s,
        )

    def client_address_for(self, address: str) -> str:
        if self.client_address == "none":
            return ""
        return address if self.client_address == "auto" else self.client_address
