"""Router wiring: ownership lease, storage discovery, the servicer."""

from __future__ import annotations

from tamto_common.channels import ChannelPool
from tamto_common.errors import Unavailable
from tamto_common.membership import KeptLease, MemberDirectory
from tamto_common.ring import HashRing, partition_key
from tamto_common.service import Runtime
from tamto_common.streams import read_stream
from tamto_protocol.v1 import router_pb2_grpc
from tamto_router.config import RouterConfig
from tamto_router.consume import DEFAULT_ACK_TIMEOUT_S, SubscriptionRegistry
from tamto_router.grpc_api import RouterServicer
from tamto_router.partitions import Partitions
from tamto_router.storage_client import StorageClient


async def setup(config: RouterConfig, runtime: Runtime) -> None:
    resources = runtime.resources
    directory = await resources.enter_async_context(MemberDirectory(runtime.etcd))
    channels = ChannelPool()
    resources.push_async_callback(channels.close)

    def storage_for(stream: str, partition: int) -> StorageClient:
        nodes = {m.instance_id: m.address for m in directory.members("storage")}
        if not nodes:
            raise Unavailable("no storage node is registered")
        owner = HashRing(nodes).owner(partition_key(stream, partition))
        return StorageClient(channels.get(nodes[owner]))

    partitions: Partitions | None = None

    async def on_new_lease(_lease: object) -> None:
        if partitions is not None:
            partitions.forget_claims()

    lease = await resources.enter_async_context(
        KeptLease(runtime.etcd, config.lease_ttl_s, on_new_lease)
    )
    partitions = Partitions(
        runtime.etcd, lambda: lease.lease, config.member_id, storage_for, config.claim_timeout_s
    )
    resources.push_async_callback(partitions.close)

    async def ack_timeout_s(stream: str) -> float:
        definition = await read_stream(runtime.etcd, stream)
        timeout_ms = getattr(definition, "ack_timeout_ms", 0) if definition else 0
        return timeout_ms / 1000 if timeout_ms else DEFAULT_ACK_TIMEOUT_S

    subscriptions = SubscriptionRegistry(partitions, ack_timeout_s, config.read_batch_messages)
    router_pb2_grpc.add_RouterServicer_to_server(
        RouterServicer(partitions, subscriptions), runtime.server
    )
