"""Router wiring: ownership lease, storage discovery, clients' publishes, the servicer."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
from collections.abc import Callable

import grpc
import structlog
from nats.aio.msg import Msg

from tamto_common.audit import AuditLog
from tamto_common.bus import EVENTS, RANGE_SHRUNK
from tamto_common.channels import ChannelPool
from tamto_common.config import MIB
from tamto_common.errors import Unavailable
from tamto_common.grpc_errors import downstream_error
from tamto_common.guard import Guard, PolicyCache
from tamto_common.ledgers import LedgerList
from tamto_common.loop_lag import FULL_GC_EVERY, LoopLagMonitor
from tamto_common.membership import KeptLease, MemberDirectory
from tamto_common.oidc import external_verifiers
from tamto_common.placement import GoneTargets, PlacementView
from tamto_common.ring import HashRing, partition_key
from tamto_common.service import Runtime
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
from tamto_router.grpc_api import RouterServicer, serve
from tamto_router.healing_metric import HEALING
from tamto_router.ledger_audit import LedgerAudit, audit_interval_s
from tamto_router.partitions import UNDER_REPLICATED, Partitions
from tamto_router.storage_client import StorageClient
from tamto_router.subscription_metrics import SubscriptionCollector, SubscriptionSampler

log = structlog.get_logger(__name__)

#: How often a router looks for partitions that are another router's share now,
#: besides every membership change.
HAND_BACK_CHECK_S = 2.0


async def setup(config: RouterConfig, runtime: Runtime) -> None:
    resources = runtime.resources
    # Measures how long any step holds the loop (gauge tamto_event_loop_lag_max_seconds).
    await resources.enter_async_context(LoopLagMonitor())
    # Full garbage collections while a crowd of consumers attaches took up to 3.1 s
    # and held every thread (the lease keep-alive's too): at most one per 1,000
    # second-generation collections (Python's default: 10). docs/testing.md, crowds.
    gc.set_threshold(*gc.get_threshold()[:2], FULL_GC_EVERY)
    directory = await resources.enter_async_context(
        MemberDirectory(runtime.etcd, wanted=("storage",))
    )
    # Moved partitions and drained routers (tamto_common.placement), as gateways see them.
    placement = await resources.enter_async_context(PlacementView(runtime.etcd))
    channels = ChannelPool()
    resources.push_async_callback(channels.close)

    cache = BatchCache(config.read_cache_mb * MIB)
    # One client per storage address, so its partitions share one append stream.
    clients: dict[str, StorageClient] = {}

    async def close_clients() -> None:
        for client in clients.values():
            await client.close()

    resources.push_async_callback(close_clients)

    def storage_for(stream: str, partition: int, ledgers: LedgerList) -> tuple[str, StorageClient]:
        """The partition's storage node: the one its ledgers were recorded on (placement
        is never recomputed: a lapsed lease must not move a partition to a node without
        its data), from the hash ring of live nodes only for a partition never opened."""
        nodes = {m.instance_id: m.address for m in directory.members("storage")}
        current = ledgers.current
        if current is not None:
            node = current.ensemble[0]  # one replica (R = 1) until replication exists
            if node not in nodes:
                raise Unavailable(
                    f"partition {stream}/{partition} is stored on storage node {node}, "
                    "which is not registered (down?); it is served again when that node is back"
                )
        elif not nodes:
            raise Unavailable("no storage node is registered")
        else:
            node = HashRing(nodes).owner(partition_key(stream, partition))
        return node, client_at(nodes[node])

    def replicas_for(
        stream: str, partition: int, ledgers: LedgerList, replication: int
    ) -> tuple[tuple[str, ...], dict[str, StorageClient]]:
        """A replicated partition's ensemble and clients of its registered members:
        its current ledger's ensemble (recorded, never recomputed: those nodes hold its
        entries), or for a partition with no ledger the `replication` live storage
        nodes that follow its hash on the storage ring."""
        nodes = {m.instance_id: m.address for m in directory.members("storage")}
        current = ledgers.current
        if current is not None:
            ensemble = current.ensemble
        else:
            ring, chosen = HashRing(nodes), list[str]()
            while ring and len(chosen) < replication:
                chosen.append(ring.owner(partition_key(stream, partition)))
                ring.remove(chosen[-1])
            ensemble = tuple(chosen)
            if len(ensemble) < replication:
                raise Unavailable(
                    f"partition {stream}/{partition} needs {replication} storage nodes, "
                    f"{len(ensemble)} are registered"
                )
        return ensemble, {n: client_at(nodes[n]) for n in ensemble if n in nodes}

    def storage_clients() -> dict[str, StorageClient]:
        """The registered storage nodes and a client of each."""
        return {m.instance_id: client_at(m.address) for m in directory.members("storage")}

    def client_at(address: str) -> StorageClient:
        channel = channels.get(address)
        client = clients.get(address)
        if client is None or client.channel is not channel:
            client = clients[address] = StorageClient(channel, cache=cache)
        return client

    partitions: Partitions | None = None

    async def on_new_lease(_lease: object) -> None:
        if partitions is not None:
            partitions.forget_claims()

    lease = await resources.enter_async_context(
        # Refreshed on a thread of its own: a saturated loop must not lose ownership.
        KeptLease(runtime.etcd, config.lease_ttl_s, on_new_lease, config.etcd_hosts())
    )

    def placed_on(stream: str, partition: int) -> str | None:
        """The other live router the partition is placed on, or None (this one's, or
        no view yet: this router's own registration is not seen)."""
        routers = {m.instance_id for m in directory.members("router")}
        if config.member_id not in routers:
            return None
        owner = placement.current.owner(routers, stream, partition)
        return None if owner == config.member_id else owner

    async def stream_def(stream: str) -> StreamDef | None:
        return await read_stream(runtime.etcd, stream)

    partitions = Partitions(
        runtime.etcd,
        lambda: lease.lease,
        config.member_id,
        storage_for,
        config.claim_timeout,
        stream_def,
        lease_valid=lease.valid,
        replicas_for=replicas_for,
        storage_clients=storage_clients,
        placed_on=placed_on,
        rereplicate_after_s=config.rereplicate_after_s,
    )
    resources.push_async_callback(partitions.close)

    def owns(stream: str, partition: int) -> bool:
        """Whether this router owns the partition by placement (False with no view)."""
        routers = {m.instance_id for m in directory.members("router")}
        if config.member_id not in routers:
            return False
        return placement.current.owner(routers, stream, partition) == config.member_id

    # Re-replication of idle partitions (docs/cluster.md section 2).
    audit = LedgerAudit(
        runtime.etcd,
        owns,
        lambda: {m.instance_id for m in directory.members("storage")},
        lambda stream, partition: (stream, partition) in partitions.claimed(),
        partitions.get,
        after_s=config.rereplicate_after_s,
    )
    UNDER_REPLICATED.set_function(
        lambda: partitions.under_replicated() + len(audit.idle_under_replicated)
    )
    HEALING.source = partitions.healing

    async def policy(stream: str) -> Policy:
        definition = await read_stream(runtime.etcd, stream) or StreamDef(stream, 1)
        return Policy(
            ack_timeout_s=definition.ack_timeout_ms / 1000,
            max_deliveries=definition.max_deliveries,
            max_lag=definition.max_lag,
            dead_letter_stream=definition.dead_letter,
        )

    sink = DeadLetterSink(
        runtime.etcd, directory, channels, partitions, config.member_id, placement
    )
    subscriptions = SubscriptionRegistry(
        partitions,
        policy,
        config.read_batch_messages,
        sink.publish,
        cursor_commit_s=config.cursor_commit_ms / 1000,
        max_consumers=config.max_consumers_per_subscription,
    )
    client_publish = await _client_publish(
        config, runtime, directory, channels, partitions, lambda: placement.current
    )
    serve(
        RouterServicer(partitions, subscriptions, config.member_id, client_publish), runtime.server
    )

    async def range_shrunk(msg: Msg) -> None:
        try:
            event = json.loads(msg.data)
            partitions.range_shrunk(event["stream"], event["partition"], event["start_offset"])
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("bad range event", error=str(exc))

    subscription = await runtime.bus.subscribe(f"{EVENTS}.{RANGE_SHRUNK}", cb=range_shrunk)
    resources.push_async_callback(subscription.unsubscribe)

    gone_targets = GoneTargets(runtime.etcd)

    async def hand_back_loop() -> None:
        """Give back the partitions that another live router owns by placement (the
        ring over routers not drained, or a move, `tamto_common.placement`) after a
        membership or placement change, and every few seconds: a router that restarts
        or joins gets its share again, as the gateways route it there, and a drained
        router or a moved partition's old owner gives its partitions up."""
        while True:
            changes = [
                asyncio.ensure_future(directory.changed.wait()),
                asyncio.ensure_future(placement.changed.wait()),
            ]
            try:
                await asyncio.wait(
                    changes, timeout=HAND_BACK_CHECK_S, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                for waiting in changes:
                    waiting.cancel()
            routers = {m.instance_id for m in directory.members("router")}
            if config.member_id not in routers:
                continue  # this router's own registration is not seen (yet): no view
            decided = placement.current
            with contextlib.suppress(Exception):  # etcd hiccup: next pass
                await gone_targets.check(decided, routers)
            ring = HashRing(decided.eligible(routers))
            for stream, partition in partitions.claimed():
                if decided.owner(routers, stream, partition, ring) == config.member_id:
                    continue
                try:
                    await partitions.hand_back(stream, partition)
                except Exception as exc:
                    log.warning("hand back failed", stream=stream, error=str(exc))

    if config.load_report_interval_s > 0:
        # Load reports and, while elected, balancing moves.
        balancer = Balancer(
            runtime.etcd,
            runtime.bus,
            config.member_id,
            LoadMeter(config.member_id, partitions.appended_totals),
            lambda: lease.lease,
            lambda: placement.current.eligible(m.instance_id for m in directory.members("router")),
            config.balance_settings(),
        )
        await balancer.start()
        resources.push_async_callback(balancer.close)

    if config.subscription_metrics_s > 0:
        sampler = SubscriptionSampler(
            SubscriptionAdmin(partitions, subscriptions, config.member_id),
            partitions.open_logs,
            SubscriptionCollector(),
            config.subscription_metrics_s,
            config.subscription_metrics_limit,
        )
        sampler.start()
        resources.push_async_callback(sampler.stop)

    hand_back = asyncio.create_task(hand_back_loop(), name="hand-back")
    auditing = asyncio.create_task(
        audit.run(audit_interval_s(config.rereplicate_after_s)), name="ledger-audit"
    )

    async def stop_hand_back() -> None:
        for task in (hand_back, auditing):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    resources.push_async_callback(stop_hand_back)


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
        members = directory.members("auth")
        if not members:
            await directory.refresh()
            members = directory.members("auth")
        if not members:
            raise Unavailable("no auth service is registered")
        stub = auth_pb2_grpc.AuthStub(channels.get(members[0].address))
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
