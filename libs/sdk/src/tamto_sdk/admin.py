"""Stream administration: ensure, describe, list, delete; stats and peek (`get`); and
cluster placement: move a partition, drain or undrain a router (`Cluster`)."""

from __future__ import annotations

import builtins

from tamto_protocol.v1 import gateway_pb2
from tamto_sdk._calls import Calls
from tamto_sdk.errors import InvalidArgument
from tamto_sdk.messages import MessageBatch
from tamto_sdk.stream_config import (
    EnsureResult,
    EphemeralConfig,
    StreamConfig,
    StreamInfo,
    StreamKind,
)
from tamto_sdk.subscriptions import StreamStats, get_messages, stream_stats

__all__ = ["Cluster", "Streams"]


class Streams:
    """Admin operations on streams; reach it as `client.streams`."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls
        self._partitions: dict[str, int] = {}

    async def ensure(
        self,
        name: str,
        *,
        partitions: int = 1,
        config: StreamConfig | EphemeralConfig | None = None,
        overwrite: bool = False,
        kind: StreamKind = StreamKind.PERSISTENT,
    ) -> EnsureResult:
        """Create stream `name` with `partitions` and `config` (default: `StreamConfig()`)
        if it is missing.

        If it exists with a different config, the result lists each difference and
        the stored config is kept, unless `overwrite` is set; then the request
        replaces it. The partition count never changes: overwriting it raises
        `FailedPrecondition`. An illegal name or value raises `InvalidArgument`
        naming the field and its allowed range.

        An ephemeral stream (docs/ephemeral.md): give `kind=StreamKind.EPHEMERAL`
        or an `EphemeralConfig` (either implies the other); it has one partition.
        """
        if isinstance(config, EphemeralConfig) or kind is StreamKind.EPHEMERAL:
            if isinstance(config, StreamConfig):
                raise InvalidArgument("an ephemeral stream takes an EphemeralConfig")
            if partitions != 1:
                raise InvalidArgument(f"an ephemeral stream has 1 partition, not {partitions}")
            wire = (config or EphemeralConfig())._to_proto()
        else:
            wire = (config or StreamConfig())._to_proto(kind, partitions)
        request = gateway_pb2.EnsureStreamRequest(name=name, config=wire, overwrite=overwrite)
        response = await self._calls.unary(self._calls.stub.EnsureStream, request)
        info = StreamInfo._from_proto(response.stream)
        self._partitions[info.name] = info.partitions
        return EnsureResult(
            stream=info, created=bool(response.created), differences=list(response.differences)
        )

    async def describe(self, name: str) -> StreamInfo:
        """The stored definition of stream `name`; raises `NotFound` if it does not exist."""
        response = await self._calls.unary(
            self._calls.stub.DescribeStream, gateway_pb2.DescribeStreamRequest(name=name)
        )
        info = StreamInfo._from_proto(response)
        self._partitions[info.name] = info.partitions
        return info

    async def list(self) -> list[StreamInfo]:
        """Every stream the caller may see, sorted by name."""
        response = await self._calls.unary(
            self._calls.stub.ListStreams, gateway_pb2.ListStreamsRequest()
        )
        return [StreamInfo._from_proto(s) for s in response.streams]

    async def delete(self, name: str) -> bool:
        """Delete stream `name` and (eventually) its data; False if there was no such stream."""
        response = await self._calls.unary(
            self._calls.stub.DeleteStream, gateway_pb2.DeleteStreamRequest(name=name)
        )
        self._partitions.pop(name, None)
        return bool(response.deleted)

    async def stats(self, name: str) -> StreamStats:
        """Per partition: first and end offsets, messages, bytes on disk (WAL and
        segments), publish rate over the last minute, and the owning router."""
        return await stream_stats(self._calls, name)

    async def get(
        self, name: str, partition: int, offset: int, count: int = 1
    ) -> builtins.list[MessageBatch]:
        """Peek: the stored messages [offset, offset + count) of one partition (at most
        1000), read without a subscription. `OutOfRange` names the stored range when
        `offset` is outside it; fewer come back when the partition ends sooner."""
        return await get_messages(self._calls, name, partition, offset, count)

    async def partition_count(self, name: str) -> int:
        """The partition count of `name`, described once and cached."""
        cached = self._partitions.get(name)
        if cached is None:
            cached = (await self.describe(name)).partitions
        return cached


class Cluster:
    """Cluster placement (admin on `*`); reach it as `client.cluster`
    (docs/cluster.md section 4)."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    async def move_partition(self, stream: str, partition: int, router: str | None) -> str:
        """Move partition `partition` of `stream` to router `router` (an instance id;
        None: back to the ring's choice), durably; returns the router that owns it now
        by placement. The current owner hands it over within seconds; subscriptions
        keep each key's order across the move. `NotFound` for an unknown stream or
        partition, `FailedPrecondition` for a router that is not live or is drained."""
        if partition < 0:
            raise InvalidArgument(f"partition must be 0 or more, not {partition}")
        request = gateway_pb2.MovePartitionRequest(
            stream=stream, partition=partition, router=router or ""
        )
        response = await self._calls.unary(self._calls.stub.MovePartition, request)
        return str(response.router)

    async def drain(self, node: str) -> builtins.list[str]:
        """Drain router `node`: its partitions move to the other routers and it gets
        none until `undrain`; returns every drained router. `NotFound` for an unknown
        router, `FailedPrecondition` when it is the last router not drained."""
        return await self._drain(node, undrain=False)

    async def undrain(self, node: str) -> builtins.list[str]:
        """Let router `node` own partitions again (its share of the ring comes back)."""
        return await self._drain(node, undrain=True)

    async def _drain(self, node: str, undrain: bool) -> builtins.list[str]:
        request = gateway_pb2.DrainNodeRequest(node=node, undrain=undrain)
        response = await self._calls.unary(self._calls.stub.DrainNode, request)
        return builtins.list(response.drained_nodes)
