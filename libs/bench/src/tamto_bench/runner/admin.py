"""The run's own clients of each system: they create a workload's stream before its
workers start (and warm its partitions up) and delete it after."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import nats
from nats.js.api import RetentionPolicy, StorageType, StreamConfig

import tamto_sdk
from tamto_bench.harness import JETSTREAM_CLUSTER_SERVERS
from tamto_bench.nats_jobs import push_consumer_config, subject_of
from tamto_bench.runner.options import CLUSTER_QUORUM, CLUSTER_REPLICAS
from tamto_bench.runner.systems import Systems
from tamto_protocol.partitioning import partition_for_key


@dataclass
class Admin:
    """One admin client per system the run measures (None: not measured)."""

    partitions: int
    tamto: tamto_sdk.Client | None = None
    tamto_r3: tamto_sdk.Client | None = None
    nats: Any = None
    nats_r3: Any = None

    async def open(self, systems: Systems) -> None:
        """Connect to every system there is in `systems`."""
        if systems.tamto is not None:
            self.tamto = await tamto_sdk.connect(systems.tamto.url, api_key=systems.tamto.api_key)
        if systems.nats_url is not None:
            self.nats = await nats.connect(systems.nats_url, max_reconnect_attempts=0)
        if systems.tamto_r3 is not None:
            self.tamto_r3 = await tamto_sdk.connect(
                systems.tamto_r3.url, api_key=systems.tamto_r3.api_key
            )
        if systems.nats_r3_url is not None:
            self.nats_r3 = await nats.connect(
                systems.nats_r3_url.split(","), max_reconnect_attempts=0
            )

    async def close(self) -> None:
        """Close the admin clients."""
        for tamto in (self.tamto, self.tamto_r3):
            if tamto is not None:
                await tamto.close()
        for nc in (self.nats, self.nats_r3):
            if nc is not None:
                await nc.close()

    async def create(self, system: str, stream: str, push: bool = False) -> None:
        """Create `stream` on `system` (with a push consumer on JetStream if `push`)."""
        if system == "tamto":
            assert self.tamto is not None
            await self.tamto.streams.ensure(stream, partitions=self.partitions)
            await self._warm_up(self.tamto, stream)
        elif system == "tamto-r3":
            assert self.tamto_r3 is not None
            config = tamto_sdk.StreamConfig(
                replication_factor=CLUSTER_REPLICAS, ack_quorum=CLUSTER_QUORUM
            )
            await self.tamto_r3.streams.ensure(stream, partitions=self.partitions, config=config)
            await self._warm_up(self.tamto_r3, stream)
        elif system == "ephemeral":
            assert self.tamto is not None
            await self.tamto.streams.ensure(
                stream, kind=tamto_sdk.stream_config.StreamKind.EPHEMERAL
            )
        elif system in ("jetstream", "jetstream-r3"):
            await self._create_jetstream(system == "jetstream-r3", stream, push)

    async def _create_jetstream(self, r3: bool, stream: str, push: bool) -> None:
        js = (self.nats_r3 if r3 else self.nats).jetstream()
        await js.add_stream(
            StreamConfig(
                name=stream,
                subjects=[subject_of(stream)],
                storage=StorageType.FILE,
                num_replicas=JETSTREAM_CLUSTER_SERVERS if r3 else 1,
                retention=RetentionPolicy.LIMITS,
            )
        )
        if push:
            await js.add_consumer(stream, push_consumer_config(stream))

    async def _warm_up(self, admin: tamto_sdk.Client, stream: str) -> None:
        """Publish one message to every partition before a window opens.

        The first publish to a partition waits for the router to take ownership
        of it (about a second here); that is a one-off, not throughput. The
        payloads are zero bytes, so latency consumers (which skip stamps from
        before their window) ignore them.
        """
        n = self.partitions
        keys: dict[int, bytes] = {}
        i = 0
        while len(keys) < n:
            key = f"warm-{i}".encode()
            keys.setdefault(partition_for_key(key, n), key)
            i += 1
        async with admin.producer(stream, linger_s=0) as producer:
            futures = [await producer.send(bytes(8), key=key) for key in keys.values()]
            await asyncio.gather(*futures)

    async def delete(self, system: str, stream: str) -> None:
        """Delete `stream` from `system`; a failure is ignored (a leftover is harmless)."""
        with contextlib.suppress(Exception):  # cleanup only: a leftover stream is harmless
            if system in ("tamto", "ephemeral") and self.tamto is not None:
                await self.tamto.streams.delete(stream)
            elif system == "tamto-r3" and self.tamto_r3 is not None:
                await self.tamto_r3.streams.delete(stream)
            elif system == "jetstream":
                await self.nats.jetstream().delete_stream(stream)
            elif system == "jetstream-r3":
                await self.nats_r3.jetstream().delete_stream(stream)
