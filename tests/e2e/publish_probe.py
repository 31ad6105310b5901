"""Another client's publishes, timed while a test attacks the cluster.

The acceptance bound of docs/validation.md: while one client sends the worst
request of each kind at its documented limit, another client's publishes stay
under 1 s. The probe publishes from a thread with its own event loop and SDK
client, so the attacking client's own work in the test's loop does not delay it.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from types import TracebackType

import tamto_sdk
from tamto_testing.cluster import TestCluster

#: The bound on another client's publish (docs/validation.md).
PUBLISH_BOUND_S = 1.0
#: How often the probe publishes.
_EVERY_S = 0.05


class PublishProbe:
    """`with PublishProbe(cluster) as probe:` publishes every 50 ms until the block ends;
    `probe.slowest` is the longest a publish took."""

    def __init__(self, cluster: TestCluster) -> None:
        self._cluster = cluster
        self._stream = f"probe-{uuid.uuid4().hex[:8]}"
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self.latencies: list[float] = []
        self._thread = threading.Thread(target=self._main, name="publish-probe", daemon=True)

    @property
    def slowest(self) -> float:
        return max(self.latencies, default=0.0)

    def __enter__(self) -> PublishProbe:
        self._thread.start()
        if not self._ready.wait(60) or self._error is not None:
            self._stop.set()
            raise AssertionError(f"the probe could not publish: {self._error}")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(30)
        if self._error is not None and exc is None:
            raise AssertionError(f"the probe's publishes failed: {self._error}")

    def _main(self) -> None:
        try:
            asyncio.run(self._publish())
        except BaseException as error:  # reported by __enter__ / __exit__
            self._error = error
            self._ready.set()

    async def _publish(self) -> None:
        cluster = self._cluster
        async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
            await client.streams.ensure(self._stream, partitions=1)
            async with client.producer(self._stream) as producer:
                await (await producer.send(b"warm-up"))
                self._ready.set()
                while not self._stop.is_set():
                    started = time.perf_counter()
                    await (await producer.send(b"probe"))
                    self.latencies.append(time.perf_counter() - started)
                    await asyncio.sleep(_EVERY_S)  # pacing, not synchronisation
