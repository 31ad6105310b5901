"""Router wiring: ownership lease, storage discovery, clients' publishes, the servicer."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
from collections.abc import Callable, Mapping

import aetcd
import grpc
import structlog
from nats.aio.msg import Msg

from tamto_common.audit import AuditLog
from tamto_common.bus import EVENTS, RANGE_SHRUNK, STREAM_DELETED
from tamto_common.channels import ChannelPool
from tamto_common.config import MIB
from tamto_common.grpc_errors import downstream_error
from tamto_common.guard import Guard, PolicyCache
from tamto_common.loop_lag import LoopLagMonitor, collect_fully_less_often
from tamto_common.membership import KeptLease, MemberDirectory
from tamto_common.oidc import external_verifiers
from tamto_common.placement import GoneTargets, PlacementView
from tamto_common.service import Runtime, bind, new_server
from tamto_common.streams import StreamDef, read_stream
from tamto_common.tokens import Authenticator, TokenVerifier, refetch_jwks
from tamto_protocol.v1 import auth_pb2, auth_pb2_grpc
from tamto_router.admin import SubscriptionAdmin
from tamto_router.balancer import Balancer, LoadMeter
from tamto_router.batch_cache import BatchCache
from tamto_router.client_api import ClientPublish, OwnerRule, RouterRing, StreamDefs
from tamto_router.config import RouterConfig
from tamto_router.consume import SubscriptionRegistry
from tamto_router.dead_letter_sink import DeadLetterSink
from tamto_router.dead_letters import Policy
from tamto_router.grpc_api import RouterServicer, serve, serve_clients
from tamto_router.healing_metric import HEALING
from tamto_router.ledger_audit import LedgerAudit, audit_interval_s
from tamto_router.partitions import UNDER_REPLICATED, Partitions
from tamto_router.placement import RouterShare, StorageNodes
from tamto_router.storage_api import StorageApi
from tamto_router.subscription_metrics import SubscriptionCollector, SubscriptionSampler

log = structlog.get_logger(__name__)


async def setup(
    config: RouterConfig,
    runtime: Runtime,
    local_storage: Mapping[str, StorageApi] | None = None,
) -> None:
    """Wire the router into `runtime`. `local_storage`: storage nodes run in this
    process, by instance id, called in-process (`tamto_router.storage_api`)."""
    resources = runtime.resources
    await _watch_the_loop(runtime)
    directory = await resources.enter_async_context(
        MemberDirectory(runtime.etcd, wanted=("storage",))
    )
    # Moved partitions and drained routers (tamto_common.placement), as gateways see them.
    placement = await resources.enter_async_context(PlacementView(runtime.etcd))
    channels = ChannelPool()
    resources.push_async_callback(channels.close)

    cache = BatchCache(config.read_cache_mb * MIB)
    storage = StorageNodes(directory, channels, cache, local_storage)
    resources.push_async_callback(storage.close)
    share = RouterShare(directory, placement, config.member_id, GoneTargets(runtime.etcd))
    partitions, lease = await _own_partitions(config, runtime, storage, share)

    sink = DeadLetterSink(
        runtime.etcd, directory, channels, partitions, config.member_id, placement
    )
    subscriptions = SubscriptionRegistry(
        partitions,
        functools.partial(_policy, runtime.etcd),
        config.read_batch_messages,
        sink.publish,
        cursor_commit_s=config.cursor_commit_ms / 1000,
        max_consumers=config.max_consumers_per_subscription,
    )
    client_publish = await _client_publish(
        config, runtime, directory, channels, partitions, lambda: placement.current
    )
    servicer = RouterServicer(partitions, subscriptions, config.member_id, client_publish)
    serve(servicer, runtime.server)
    if client_publish is not None:
        await _serve_clients(config, runtime, servicer)

    await _follow_range_events(runtime, partitions)
    await _follow_stream_deletions(runtime, partitions)
    if config.load_report_interval_s > 0:
        await _start_balancer(config, runtime, partitions, lease, share)
    if config.subscription_metrics_s > 0:
        _start_sampler(config, runtime, partitions, subscriptions)

    _start_upkeep(config, runtime, partitions, share, directory)


async def _watch_the_loop(runtime: Runtime) -> None:
    """Measure how long any step holds the loop (gauge tamto_event_loop_lag_max_seconds),
    and make full garbage collections rare: while a crowd of consumers attaches they
    took up to 3.1 s and held every thread, the lease keep-alive's too."""
    await runtime.resources.enter_async_context(LoopLagMonitor())
    collect_fully_less_often()


async def _own_partitions(
    config: RouterConfig, runtime: Runtime, storage: StorageNodes, share: RouterShare
) -> tuple[Partitions, KeptLease]:
    """The partitions this router owns, under the lease that keeps its ownership."""
    partitions: Partitions | None = None

    async def on_new_lease(_lease: object) -> None:
        if partitions is not None:
            partitions.forget_claims()

    lease = await runtime.resources.enter_async_context(
        # Refreshed on a thread of its own: a saturated loop must not lose ownership.
        KeptLease(runtime.etcd, config.lease_ttl_s, on_new_lease, config.etcd_hosts())
    )

    async def stream_def(stream: str) -> StreamDef | None:
        return await read_stream(runtime.etcd, stream)

    partitions = Partitions(
        runtime.etcd,
        lambda: lease.lease,
        config.member_id,
        storage.storage_for,
        config.claim_timeout,
        stream_def,
        lease_valid=lease.valid,
        replicas_for=storage.replicas_for,
        storage_clients=storage.clients,
        placed_on=share.placed_on,
        rereplicate_after_s=config.rereplicate_after_s,
    )
    runtime.resources.push_async_callback(partitions.close)
    return partitions, lease


def _start_sampler(
    config: RouterConfig,
    runtime: Runtime,
    partitions: Partitions,
    subscriptions: SubscriptionRegistry,
) -> None:
    """Sample every subscription's backlog into the subscription metrics."""
    sampler = SubscriptionSampler(
        SubscriptionAdmin(partitions, subscriptions, config.member_id),
        partitions.open_logs,
        SubscriptionCollector(),
        config.subscription_metrics_s,
        config.subscription_metrics_limit,
    )
    sampler.start()
    runtime.resources.push_async_callback(sampler.stop)


def _start_upkeep(
    config: RouterConfig,
    runtime: Runtime,
    partitions: Partitions,
    share: RouterShare,
    directory: MemberDirectory,
) -> None:
    """The background work that keeps ownership and replicas right: handing back
    partitions that are another router's share, and re-replicating idle partitions
    (docs/cluster.md section 2)."""
    audit = LedgerAudit(
        runtime.etcd,
        share.owns,
        lambda: {m.instance_id for m in directory.members("storage")},
        lambda stream, partition: (stream, partition) in partitions.claimed(),
        partitions.get,
        after_s=config.rereplicate_after_s,
    )
    UNDER_REPLICATED.set_function(
        lambda: partitions.under_replicated() + len(audit.idle_under_replicated)
    )
    HEALING.source = partitions.healing

    hand_back = asyncio.create_task(
        share.hand_back_loop(partitions.held, partitions.hand_back), name="hand-back"
    )
    auditing = asyncio.create_task(
        audit.run(audit_interval_s(config.rereplicate_after_s)), name="ledger-audit"
    )

    async def stop_hand_back() -> None:
        for task in (hand_back, auditing):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    runtime.resources.push_async_callback(stop_hand_back)


async def _policy(etcd: aetcd.Client, stream: str) -> Policy:
    """A stream's delivery policy, as its definition in etcd says now."""
    definition = await read_stream(etcd, stream) or StreamDef(stream, 1)
    return Policy(
        ack_timeout_s=definition.ack_timeout_ms / 1000,
        max_deliveries=definition.max_deliveries,
        max_lag=definition.max_lag,
        dead_letter_stream=definition.dead_letter,
    )


async def _follow_range_events(runtime: Runtime, partitions: Partitions) -> None:
    """Storage's announcements that a partition's readable range shrank (retention)."""

    async def range_shrunk(msg: Msg) -> None:
        try:
            event = json.loads(msg.data)
            partitions.range_shrunk(event["stream"], event["partition"], event["start_offset"])
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("bad range event", error=str(exc))

    subscription = await runtime.bus.subscribe(f"{EVENTS}.{RANGE_SHRUNK}", cb=range_shrunk)
    runtime.resources.push_async_callback(subscription.unsubscribe)


async def _follow_stream_deletions(runtime: Runtime, partitions: Partitions) -> None:
    """A deleted stream's partitions are handed back at once: their logs close (and
    their subscriptions with them), and nothing of the old stream stays open here."""

    async def stream_deleted(msg: Msg) -> None:
        try:
            stream = json.loads(msg.data)["stream"]
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("bad stream event", error=str(exc))
            return
        held = {k for k in [*partitions.held(), *partitions.open_logs()] if k[0] == stream}
        for _, partition in sorted(held):
            try:
                await partitions.hand_back(stream, partition)
            except Exception as exc:  # etcd: the owner key goes with the stream's keys
                log.warning("deleted stream's partition not handed back", error=str(exc))

    subscription = await runtime.bus.subscribe(f"{EVENTS}.{STREAM_DELETED}", cb=stream_deleted)
    runtime.resources.push_async_callback(subscription.unsubscribe)


async def _start_balancer(
    config: RouterConfig,
    runtime: Runtime,
    partitions: Partitions,
    lease: KeptLease,
    share: RouterShare,
) -> None:
    """Load reports and, while this router is the elected balancer, balancing moves."""
    balancer = Balancer(
        runtime.etcd,
        runtime.bus,
        config.member_id,
        LoadMeter(config.member_id, partitions.appended_totals),
        lambda: lease.lease,
        share.eligible_routers,
        config.balance_settings(),
    )
    await balancer.start()
    runtime.resources.push_async_callback(balancer.close)


async def _serve_clients(config: RouterConfig, runtime: Runtime, servicer: RouterServicer) -> None:
    """With TLS requiring client certificates on --port (mTLS between services),
    clients' direct calls get a listener of their own (--client-port) that asks for
    none: clients hold API keys or tokens, as at the gateway. It serves only the
    client RPCs, and is the client address advertised unless --client-address names
    another. Without TLS, or with --tls-client-auth optional, --port serves clients."""
    tls = config.tls()
    if tls is None or not tls.require_client_cert:
        return
    server = new_server()
    serve_clients(servicer, server)
    client_tls = dataclasses.replace(tls, require_client_cert=False)
    port = bind(server, config.host, config.client_port, client_tls)
    await server.start()
    runtime.resources.push_async_callback(server.stop, config.shutdown_grace_s)
    if config.client_address == "auto":
        runtime.advertise["client_address"] = f"{config.dial_host}:{port}"
    log.info("serving clients", address=f"{config.dial_host}:{port}", tls="no client cert")


async def _client_publish(
    config: RouterConfig,
    runtime: Runtime,
    directory: MemberDirectory,
    channels: ChannelPool,
    partitions: Partitions,
    rule: Callable[[], OwnerRule] | None = None,
) -> ClientPublish | None:
    """Clients' publishes (the direct path), verified as at the gateway: auth's tokens
    with its JWKS and the external OIDC issuers of `--oidc-issuers-file`, the policy
    cached from etcd, denials audited on the bus. None when this router advertises no
    client address."""
    if not config.client_address_for("-"):
        return None
    external = external_verifiers(config.oidc_issuers_file)

    async def fetch_jwks() -> str:
        auth = await directory.first("auth")
        stub = auth_pb2_grpc.AuthStub(channels.get(auth.address))
        try:
            answer = await stub.GetJwks(auth_pb2.GetJwksRequest(), timeout=10)
        except grpc.aio.AioRpcError as exc:
            raise downstream_error(exc, "auth") from exc
        return str(answer.jwks_json)

    resources = runtime.resources
    verifier = TokenVerifier(fetch_jwks, config.token_issuer, config.token_audience)
    audit = AuditLog("router", None, runtime.bus)
    resources.push_async_callback(audit.close)
    cache = PolicyCache(runtime.etcd, runtime.bus, config.policy_refresh_s)
    new_signing_key = cache.signing_key_events()
    await cache.start()
    resources.push_async_callback(cache.stop)
    refresher = asyncio.create_task(refetch_jwks(verifier, new_signing_key), name="jwks-refetch")

    async def stop_refresher() -> None:
        refresher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await refresher

    resources.push_async_callback(stop_refresher)
    return ClientPublish(
        Guard(Authenticator(verifier, external), cache, audit),
        partitions,
        RouterRing(directory, config.member_id, rule),
        StreamDefs(runtime.etcd),
        config.max_message_bytes,
    )
