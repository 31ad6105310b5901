"""The direct path: a producer publishes straight to the router that owns the partition.

Through the gateway a publish crosses two Python gRPC hops before storage; with
`ClientOptions(direct=True)` (the default; `TAMTO_DIRECT=0` turns it off) the
producer looks each stream's partitions up once
(`Gateway.Lookup`: the owner router's client address per partition) and sends
each batch to its owner on a pipelined stream of its own (one channel per
owner), as Kafka and Pulsar clients do (docs/cluster.md section 5), over TLS when
the gateway is (a TLS router serves clients on a listener of its own, verified
with the client's CA). The gateway
stays the edge for everything else, and the fallback:

- a router that does not own the partition (it moved) answers
  FAILED_PRECONDITION with the owner it knows in trailing metadata
  (`tamto-owner`): the batch is resent there, or after a fresh lookup, with the
  same ids, which the owner's dedup window makes safe; after
  `MAX_REDIRECTS` the batch goes through the gateway;
- a partition whose owner advertises no client address, a gateway without
  `Lookup`, or an owner that cannot be reached (UNAVAILABLE, a deadline): the
  batch goes through the gateway (with its retries), and the stream's batches
  keep doing so for `PROXY_AFTER_FAILURE_S` before a new lookup.

Only batches whose every message has an id take this path (`deduplicated`): a
resend after a redirect or a failure is then safe. Order holds: a partition has
one batch in flight at a time, whichever path it takes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

import grpc

from tamto_protocol.pipelined import Encode, PipelinedCalls
from tamto_protocol.v1 import gateway_pb2
from tamto_protocol.wire import ROUTER_PUBLISH, ROUTER_PUBLISH_STREAM
from tamto_sdk._calls import Calls
from tamto_sdk.errors import TamtoError, from_rpc_error

__all__ = ["DirectPublisher"]

#: Trailing metadata of a router's redirect: the owner's client address.
OWNER_METADATA: Final = "tamto-owner"
#: Redirects followed for one batch before it goes through the gateway.
MAX_REDIRECTS: Final = 3
#: How long a stream's batches go through the gateway after its lookup failed or an
#: owner could not be reached, before the next lookup.
PROXY_AFTER_FAILURE_S: Final = 1.0

#: A router answering these cannot serve this client (a router from before the direct
#: path, or one that cannot verify the token, e.g. an external issuer's): the gateway can.
_PROXY_CODES: Final = (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.UNAUTHENTICATED)

#: Opens a channel to a router's client address (the client's TLS settings).
OpenChannel = Callable[[str], grpc.aio.Channel]


class DirectPublisher:
    """Publishes batches to partition owners, or says to use the gateway (None)."""

    def __init__(self, calls: Calls, open_channel: OpenChannel) -> None:
        self._calls = calls
        self._open_channel = open_channel
        #: Per stream: each partition's owner client address ("" : through the gateway).
        self._owners: dict[str, list[str]] = {}
        #: Per stream: until when (monotonic) its batches go through the gateway.
        self._proxy_until: dict[str, float] = {}
        #: Per router address: its channel and the publishes pipelined on it.
        self._routers: dict[str, tuple[grpc.aio.Channel, PipelinedCalls]] = {}
        #: Batches that went to an owner directly, and through the gateway (tests read them).
        self.direct_batches = 0
        self.proxied_batches = 0
        #: Redirects followed (a router answered that it does not own the partition).
        self.redirects = 0

    async def publish(self, stream: str, partition: int, request: Encode) -> Any | None:
        """The owner's `PublishResponse`, or None: publish this batch through the gateway.

        Raises the `TamtoError` of a refusal that holds wherever the batch goes
        (permission denied, a malformed batch, ...)."""
        redirected: str | None = None
        for _ in range(MAX_REDIRECTS + 1):
            address = redirected or await self._owner(stream, partition)
            redirected = None
            if not address:
                break
            try:
                response = await self._send(address, request)
            except grpc.aio.AioRpcError as exc:
                trailing = dict(exc.trailing_metadata() or ())
                if exc.code() is grpc.StatusCode.FAILED_PRECONDITION and OWNER_METADATA in trailing:
                    # Moved: go where the router says, else look the stream up again.
                    self._owners.pop(stream, None)
                    redirected = str(trailing[OWNER_METADATA]) or None
                    self.redirects += 1
                    continue
                error: TamtoError = from_rpc_error(exc, deduplicated=True)
                if not error.retriable and exc.code() not in _PROXY_CODES:
                    raise error from None
                self._proxy_for_a_while(stream)  # unreachable, restarting, or can't serve us
                break
            self.direct_batches += 1
            return response
        self.proxied_batches += 1
        return None

    async def _send(self, address: str, request: Encode) -> Any:
        """One publish to the router at `address`, re-authenticating once if refused."""
        calls = self._publisher(address)
        auth = self._calls.auth
        metadata = await auth.metadata()
        timeout = self._calls.options.rpc_timeout_s
        try:
            return await calls(request, metadata=metadata, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            if exc.code() is not grpc.StatusCode.UNAUTHENTICATED:
                raise
            await auth.renew_after_rejection(metadata)
            return await calls(request, metadata=await auth.metadata(), timeout=timeout)

    async def _owner(self, stream: str, partition: int) -> str:
        """The owner's client address of the partition ("" : through the gateway)."""
        if time.monotonic() < self._proxy_until.get(stream, 0.0):
            return ""
        owners = self._owners.get(stream)
        if owners is None:
            try:
                answer = await self._calls.unary(
                    self._calls.stub.Lookup, gateway_pb2.LookupRequest(stream=stream), retry=False
                )
            except TamtoError:  # a gateway without Lookup, or down: its own path says why
                self._proxy_for_a_while(stream)
                return ""
            owners = [""] * (max((p.partition for p in answer.partitions), default=-1) + 1)
            for p in answer.partitions:
                owners[p.partition] = p.address
            self._owners[stream] = owners
        return owners[partition] if partition < len(owners) else ""

    def _proxy_for_a_while(self, stream: str) -> None:
        self._owners.pop(stream, None)
        self._proxy_until[stream] = time.monotonic() + PROXY_AFTER_FAILURE_S

    def _publisher(self, address: str) -> PipelinedCalls:
        known = self._routers.get(address)
        if known is None:
            channel = self._open_channel(address)
            calls = PipelinedCalls(
                channel,
                ROUTER_PUBLISH_STREAM,
                gateway_pb2.PublishStreamResponse,
                fallback=(ROUTER_PUBLISH, gateway_pb2.PublishResponse),
            )
            known = self._routers[address] = (channel, calls)
        return known[1]

    async def close(self) -> None:
        """End the publish streams and close the channels to routers."""
        for channel, calls in self._routers.values():
            await calls.close()
            await channel.close()
        self._routers.clear()
