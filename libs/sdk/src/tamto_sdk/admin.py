"""Stream administration: ensure, describe, list."""

from __future__ import annotations

from tamto_protocol.v1 import gateway_pb2, messages_pb2
from tamto_sdk._calls import Calls
from tamto_sdk.messages import EnsureResult, StreamInfo, StreamKind, kind_to_proto

__all__ = ["Streams"]


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
        overwrite: bool = False,
        kind: StreamKind = StreamKind.PERSISTENT,
    ) -> EnsureResult:
        """Create stream `name` if missing.

        If it exists with a different config, the result lists the differences and
        the stored config is kept, unless `overwrite` is set.
        """
        if partitions <= 0:
            raise ValueError("partitions must be positive")
        request = gateway_pb2.EnsureStreamRequest(
            name=name,
            config=messages_pb2.StreamConfig(kind=kind_to_proto(kind), partitions=partitions),
            overwrite=overwrite,
        )
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
        """Every stream the caller may see."""
        response = await self._calls.unary(
            self._calls.stub.ListStreams, gateway_pb2.ListStreamsRequest()
        )
        return [StreamInfo._from_proto(s) for s in response.streams]

    async def partition_count(self, name: str) -> int:
        """The partition count of `name`, described once and cached."""
        cached = self._partitions.get(name)
        if cached is None:
            cached = (await self.describe(name)).partitions
        return cached
