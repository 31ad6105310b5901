"""What Tamto's Prometheus dashboards show: each panel as PromQL over a metric a
service exports, grouped into the dashboards (`DASHBOARDS`).

The content of the dashboards, apart from how they are drawn: dashboards.py beside
this file turns these specs into Grafana's JSON and writes the files. A renamed
metric is caught here by tests/repo/test_dashboards.py instead of leaving a panel
blank. The expressions use Grafana's `$__rate_interval` and the dashboards'
`$stream` variable; nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The services' scrape jobs (infra/prometheus/prometheus.yml names each after its service).
JOBS = 'job=~"gateway|router|storage|auth"'
RATE = "$__rate_interval"


@dataclass(frozen=True)
class Query:
    """One PromQL expression of a panel and the legend of its series."""

    expr: str
    legend: str = ""


@dataclass(frozen=True)
class PanelSpec:
    """A panel: a time series by default, a stat (the latest value) with `stat=True`."""

    title: str
    queries: tuple[Query, ...]
    unit: str = "short"
    description: str = ""
    stat: bool = False


def rate(metric: str, by: str, selector: str = "") -> str:
    return f"sum by ({by}) (rate({metric}{{{selector}}}[{RATE}]))"


def total(metric: str, by: str, selector: str = "", how: str = "sum") -> str:
    return f"{how} by ({by}) ({metric}{{{selector}}})"


def quantile(q: float, histogram: str, by: str, selector: str = "") -> str:
    return f"histogram_quantile({q}, {rate(histogram + '_bucket', f'{by}, le', selector)})"


def latency(title: str, histogram: str, selector: str, by: str, description: str) -> PanelSpec:
    """p50 and p99 of a histogram, per `by`."""
    legend = "{{" + by + "}}"
    return PanelSpec(
        title,
        (
            Query(quantile(0.5, histogram, by, selector), f"p50 {legend}"),
            Query(quantile(0.99, histogram, by, selector), f"p99 {legend}"),
        ),
        unit="s",
        description=description,
    )


def appended(what: str, selector: str, description: str, unit: str = "short") -> PanelSpec:
    """Messages or bytes (`what`) storage appended per second, per stream."""
    return PanelSpec(
        f"{what.capitalize()} appended per second",
        (Query(rate(f"tamto_storage_appended_{what}_total", "stream", selector), "{{stream}}"),),
        unit=unit,
        description=description,
    )


STREAM = 'stream=~"$stream"'

OVERVIEW = (
    appended(
        "messages",
        "",
        "Acknowledged messages stored, per stream, counted by every replica "
        "(a stream of replication factor 3 counts each message three times).",
    ),
    appended(
        "bytes", "", "Arrow IPC bytes stored, per stream, counted by every replica.", unit="Bps"
    ),
    PanelSpec(
        "Calls per second by service and status",
        (Query(rate("tamto_rpc_server_seconds_count", "job, code", JOBS), "{{job}} {{code}}"),),
        unit="reqps",
        description="gRPC calls each service answered (a stream counts once, when it ends).",
    ),
    PanelSpec(
        "Calls answered other than OK",
        (
            Query(
                rate("tamto_rpc_server_seconds_count", "job, method, code", 'code!~"OK|CANCELLED"'),
                "{{job}} {{method}} {{code}}",
            ),
        ),
        unit="reqps",
        description="UNAVAILABLE is retried by the SDK; INTERNAL is a bug; "
        "UNAUTHENTICATED and PERMISSION_DENIED are refused credentials.",
    ),
    latency(
        "Publish latency at the gateways and routers",
        "tamto_rpc_server_seconds",
        'method=~"/tamto.v1.(Gateway|Router)/Publish",code="OK"',
        "instance",
        "Unary Publish calls, from arrival to acknowledgement (streams are timed whole): "
        "at a gateway, and at a router for a client on the direct path (the SDK's default).",
    ),
    latency(
        "Publish to ack, at the gateways",
        "tamto_gateway_publish_ack_seconds",
        "",
        "instance",
        "Each published batch, every API and pipelined streams included: from reaching the "
        "gateway to durable on the partition's quorum.",
    ),
    latency(
        "Publish to first delivery, at the routers",
        "tamto_router_publish_to_deliver_seconds",
        "",
        "instance",
        "From a batch's publish time to its first delivery to a consumer: grows with backlog.",
    ),
    PanelSpec(
        "Messages in and out per second, per stream",
        (
            Query(
                rate("tamto_router_stream_messages_total", "stream, direction"),
                "{{direction}} {{stream}}",
            ),
        ),
        description="At the routers: in = appended (counted once, whatever the replication), "
        "out = delivered to consumers (redeliveries included).",
    ),
    PanelSpec(
        "Logins and denials per second",
        (
            Query(rate("tamto_auth_logins_total", "outcome"), "login {{outcome}}"),
            Query(rate("tamto_auth_denials_total", "reason"), "denied {{reason}}"),
        ),
        unit="reqps",
        description="API key logins at auth, and calls refused by the gateways and routers "
        "(unauthenticated, or lacking a permission).",
    ),
    latency(
        "Append latency at the routers",
        "tamto_rpc_server_seconds",
        'method=~"/tamto.v1.Router/(Append|Publish)",code="OK"',
        "instance",
        "A router's durable append (Append from a gateway, Publish from a direct client): "
        "offsets, the replicas' appends and fsyncs, up to the quorum.",
    ),
    PanelSpec(
        "Processes up",
        (Query(f"sum by (job) (up{{{JOBS}}})", "{{job}}"),),
        stat=True,
        description="Instances answering Prometheus' scrapes, per service.",
    ),
    PanelSpec(
        "CPU per process",
        (Query(rate("process_cpu_seconds_total", "job, instance", JOBS), "{{instance}}"),),
        unit="percentunit",
    ),
    PanelSpec(
        "Resident memory per process",
        (Query(total("process_resident_memory_bytes", "job, instance", JOBS), "{{instance}}"),),
        unit="bytes",
    ),
)

STREAMS = (
    appended("messages", STREAM, "Counted by every replica."),
    appended("bytes", STREAM, "Counted by every replica.", unit="Bps"),
    PanelSpec(
        "Average message size",
        (
            Query(
                f"{rate('tamto_storage_appended_bytes_total', 'stream', STREAM)} / "
                f"{rate('tamto_storage_appended_messages_total', 'stream', STREAM)}",
                "{{stream}}",
            ),
        ),
        unit="bytes",
        description="Arrow IPC bytes per message, headers and framing included.",
    ),
    PanelSpec(
        "Consumers attached",
        (Query(total("tamto_router_attached_consumers", "stream", STREAM), "{{stream}}"),),
        description="One per consumer and partition it is attached to, over the routers.",
    ),
    PanelSpec(
        "Ephemeral messages per second",
        (
            Query(
                rate("tamto_ephemeral_published_messages_total", "stream", STREAM),
                "published {{stream}}",
            ),
            Query(
                rate("tamto_ephemeral_unmatched_messages_total", "stream", STREAM),
                "unmatched {{stream}}",
            ),
        ),
        description="Ephemeral streams (docs/ephemeral.md): published at the gateways, and "
        "those no consumer matched (dropped).",
    ),
)

CONSUMERS = (
    PanelSpec(
        "Consumers attached per stream",
        (Query("sum by (stream) (tamto_router_attached_consumers)", "{{stream}}"),),
        description="One per consumer and partition it is attached to, over the routers.",
    ),
    PanelSpec(
        "Client consume streams at the gateways, by step",
        (Query("sum by (step) (tamto_gateway_consume_handlers)", "{{step}}"),),
        description="A consumer that does not attach shows the step its gateway waits at.",
    ),
    PanelSpec(
        "Consume sessions per router",
        (Query("sum by (router) (tamto_gateway_consume_mux_sessions)", "{{router}}"),),
        description="Sessions the gateways hold on each router's consume stream.",
    ),
    PanelSpec(
        "Consume streams ended per second, by status",
        (
            Query(
                rate(
                    "tamto_rpc_server_seconds_count",
                    "method, code",
                    'method=~"/tamto.v1.Gateway/Consume|/tamto.v1.Router/ConsumeMux"',
                ),
                "{{method}} {{code}}",
            ),
        ),
        unit="reqps",
    ),
)

SUBSCRIPTION = 'stream=~"$stream"'
BY_SUBSCRIPTION = "stream, subscription"
SUBSCRIPTIONS = (
    PanelSpec(
        "Backlog (messages)",
        (
            Query(
                total("tamto_subscription_backlog_messages", BY_SUBSCRIPTION, SUBSCRIPTION),
                "{{stream}} {{subscription}}",
            ),
        ),
        description="Messages not acked yet, summed over partitions (and the routers owning "
        "them): what `tamto sub describe` shows. Subscriptions beyond a router's "
        "--subscription-metrics-limit are summed under _other.",
    ),
    PanelSpec(
        "Backlog (bytes, estimated)",
        (
            Query(
                total("tamto_subscription_backlog_bytes", BY_SUBSCRIPTION, SUBSCRIPTION),
                "{{stream}} {{subscription}}",
            ),
        ),
        unit="bytes",
    ),
    PanelSpec(
        "Backlog growth per second",
        (
            Query(
                f"sum by ({BY_SUBSCRIPTION}) "
                f"(deriv(tamto_subscription_backlog_messages{{{SUBSCRIPTION}}}[5m]))",
                "{{stream}} {{subscription}}",
            ),
        ),
        description="Above 0 for long: consumers do not keep up (the alert "
        "TamtoSubscriptionBacklogGrowing).",
    ),
    PanelSpec(
        "Oldest unacked message age",
        (
            Query(
                total(
                    "tamto_subscription_oldest_unacked_age_seconds",
                    BY_SUBSCRIPTION,
                    SUBSCRIPTION,
                    "max",
                ),
                "{{stream}} {{subscription}}",
            ),
        ),
        unit="s",
        description="A stuck message (nacked again and again, or a consumer holding it) "
        "shows here while the backlog may look small.",
    ),
    PanelSpec(
        "Unacked and consumers",
        (
            Query(
                total("tamto_subscription_unacked", BY_SUBSCRIPTION, SUBSCRIPTION),
                "unacked {{stream}} {{subscription}}",
            ),
            Query(
                total("tamto_subscription_consumers", BY_SUBSCRIPTION, SUBSCRIPTION),
                "consumers {{stream}} {{subscription}}",
            ),
        ),
    ),
    PanelSpec(
        "Redeliveries and dead letters (totals)",
        (
            Query(
                total("tamto_subscription_redeliveries", BY_SUBSCRIPTION, SUBSCRIPTION),
                "redelivered {{stream}} {{subscription}}",
            ),
            Query(
                total("tamto_subscription_dead_lettered", BY_SUBSCRIPTION, SUBSCRIPTION),
                "dead-lettered {{stream}} {{subscription}}",
            ),
        ),
        description="Kept with the cursor: they survive router restarts and changes of owner.",
    ),
)

CLUSTER = (
    PanelSpec(
        "Members up",
        (Query(f"up{{{JOBS}}}", "{{job}} {{instance}}"),),
        stat=True,
    ),
    PanelSpec(
        "Under-replicated ledgers",
        (Query("sum by (instance) (tamto_router_under_replicated_ledgers)", "{{instance}}"),),
        stat=True,
        description="Ledgers a router writes with a replica taking no appends (docs/cluster.md).",
    ),
    PanelSpec(
        "Disk full",
        (Query("max by (instance) (tamto_storage_disk_full)", "{{instance}}"),),
        stat=True,
        description="1 while the storage node refuses appends for lack of space.",
    ),
    PanelSpec(
        "Damaged files and quarantined batches",
        (
            Query("sum(tamto_storage_damaged_files) or vector(0)", "damaged files"),
            Query("sum(tamto_storage_quarantined_batches) or vector(0)", "quarantined batches"),
        ),
        stat=True,
        description="Series exist only once a node found some: 0 stands for none.",
    ),
    latency(
        "WAL fsync latency",
        "tamto_storage_fsync_seconds",
        "",
        "instance",
        "One fsync per group commit: every acknowledged publish waits for one.",
    ),
    PanelSpec(
        "Batches per group commit (p50)",
        (Query(quantile(0.5, "tamto_storage_group_commit_batches", "instance"), "{{instance}}"),),
    ),
    PanelSpec(
        "Storage appends per second by status",
        (
            Query(
                rate(
                    "tamto_rpc_server_seconds_count",
                    "instance, code",
                    'method=~"/tamto.v1.Storage/Append(Stream)?"',
                ),
                "{{instance}} {{code}}",
            ),
        ),
        unit="reqps",
    ),
    PanelSpec(
        "Unsealed bytes",
        (Query("sum by (instance) (tamto_storage_unsealed_bytes)", "{{instance}}"),),
        unit="bytes",
        description="Acknowledged but not yet sealed into Parquet.",
    ),
    PanelSpec(
        "Partition ownership changes (1 h)",
        (
            Query(
                "sum by (instance, change) (increase(tamto_router_ownership_changes_total[1h]))",
                "{{instance}} {{change}}",
            ),
        ),
        description="claimed: opened by this router; handed_back: another router's by "
        "placement now; lost: the router's etcd lease lapsed.",
    ),
    PanelSpec(
        "etcd leases granted anew (1 h)",
        (
            Query(
                "sum by (job, instance) (increase(tamto_lease_regrants_total[1h]))", "{{instance}}"
            ),
        ),
        description="A lost lease: a router gave up its partitions and claimed them again.",
    ),
    PanelSpec(
        "Event loop held and GC pauses (longest since start)",
        (
            Query(
                total("tamto_event_loop_lag_max_seconds", "instance", JOBS, "max"),
                "loop {{instance}}",
            ),
            Query(total("tamto_gc_pause_max_seconds", "instance", JOBS, "max"), "gc {{instance}}"),
        ),
        unit="s",
    ),
)


@dataclass(frozen=True)
class DashboardSpec:
    uid: str
    title: str
    description: str
    panels: tuple[PanelSpec, ...]
    per_stream: bool = False


DASHBOARDS = (
    DashboardSpec(
        "tamto-overview",
        "Tamto / Overview",
        "Traffic, errors, latency and processes of a whole Tamto system.",
        OVERVIEW,
    ),
    DashboardSpec(
        "tamto-streams",
        "Tamto / Streams",
        "Per stream: what is appended, its size, who consumes it.",
        STREAMS,
        per_stream=True,
    ),
    DashboardSpec(
        "tamto-consumers",
        "Tamto / Consumers",
        "Consumers and their sessions (per subscription: Tamto / Subscriptions).",
        CONSUMERS,
    ),
    DashboardSpec(
        "tamto-subscriptions",
        "Tamto / Subscriptions",
        "Per subscription: backlog, its growth, oldest unacked age, unacked, consumers, "
        "redeliveries and dead letters (the numbers of `tamto sub describe`).",
        SUBSCRIPTIONS,
        per_stream=True,
    ),
    DashboardSpec(
        "tamto-cluster",
        "Tamto / Cluster health",
        "Members, replication, storage nodes' disks and durability, leases, event loops.",
        CLUSTER,
    ),
)
