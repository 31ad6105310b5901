"""The ephemeral producer: publishes to one ephemeral stream, at most once.

`EphemeralProducer` (`client.ephemeral_producer`): `send(payload, topic=...)` queues
a message and batches what is queued per topic while the previous call is in
flight; a failed call is not retried (it may have reached consumers).
"""

from __future__ import annotations

import asyncio
import collections
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from tamto_protocol.wire import publish_ephemeral_request
from tamto_sdk._calls import Calls
from tamto_sdk._deprecated import renamed_method
from tamto_sdk._lifecycle import AsyncClosing
from tamto_sdk.ephemeral_messages import encode_arrow
from tamto_sdk.errors import Closed, InvalidArgument, TamtoError

__all__ = ["EphemeralProducer"]

#: A queued message: (topic, payload, key, headers).
_Queued = tuple[str, bytes, bytes | None, Mapping[str, str] | None]


class EphemeralProducer(AsyncClosing):
    """Publishes to one ephemeral stream; use it as an async context manager.

    `send` queues a message and returns. Messages keep their order whatever
    their topics: one call is in flight at a time, and what was queued meanwhile
    goes in the next, as consecutive runs of one topic each (a call carries the
    first run and `more_runs`, published in that order), at most
    `max_batch_messages` and, unless one message is larger, `max_batch_bytes` of
    payload in all (the bus carries 1 MiB per message, and a gateway slices
    larger batches). `flush` waits until everything queued was taken by a
    gateway, and raises the first error since the last flush.
    """

    def __init__(
        self,
        calls: Calls,
        stream: str,
        *,
        max_batch_messages: int = 1000,
        max_pending: int = 100_000,
        max_batch_bytes: int = 512 << 10,
    ) -> None:
        self._calls = calls
        self._stream = stream
        self._max_batch = max_batch_messages
        self._max_batch_bytes = max_batch_bytes
        self._max_pending = max_pending
        self._queue: collections.deque[_Queued] = collections.deque()
        self._sender: asyncio.Task[None] | None = None
        #: Set once a gateway published only the first run of a call (it predates
        #: `more_runs`): from then on each run goes in a call of its own.
        self._one_run_per_call = False
        self._room = asyncio.Event()
        self._room.set()
        self._error: TamtoError | None = None
        self._closed = False

    @property
    def stream(self) -> str:
        return self._stream

    async def send(
        self,
        payload: bytes,
        *,
        topic: str = "",
        key: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Queue one message under `topic` (words separated by '.'; the gateway
        checks it, docs/ephemeral.md)."""
        if self._closed:
            raise Closed("producer is closed")
        self._raise_error()
        while len(self._queue) >= self._max_pending:
            self._room.clear()
            await self._room.wait()
        self._queue.append((topic, bytes(payload), key, headers))
        if self._sender is None:
            self._sender = asyncio.create_task(self._send())

    async def send_batch(self, payloads: Sequence[bytes], *, topic: str = "") -> int:
        """Publish `payloads` under `topic` as one batch now; returns how many
        consuming entities the gateway knew to match (0: they were unmatched)."""
        response = await self._call([(topic, *encode_arrow(payloads))])
        return int(response.matched_entities)

    async def _call(self, runs: Sequence[tuple[str, pa.Buffer, int]]) -> Any:
        """One PublishEphemeral call carrying `runs` (topic, Arrow IPC, count) in order."""
        # Pipelined on the client's one ephemeral publish stream, written in wire form
        # from the IPC buffers: the Arrow bytes are copied once (a generated request
        # copies them into itself and again to serialise).
        (topic, arrow_ipc, count), *more = runs
        request = functools.partial(
            publish_ephemeral_request, self._stream, topic, arrow_ipc, count, more_runs=more
        )
        return await self._calls.unary(self._calls.publish_ephemeral_raw, request, retry=False)

    def _take(self) -> list[_Queued]:
        """The next messages to send: at least one, at most the batch limits."""
        taken = [self._queue.popleft()]
        size = len(taken[0][1])
        while self._queue and len(taken) < self._max_batch:
            size += len(self._queue[0][1])
            if size > self._max_batch_bytes:
                break
            taken.append(self._queue.popleft())
        return taken

    async def _send(self) -> None:
        try:
            while self._queue:
                taken = self._take()
                try:
                    await self._send_runs(_runs(taken))
                except TamtoError as exc:
                    self._error = self._error or exc
                except Exception as exc:
                    self._error = self._error or InvalidArgument(f"cannot publish: {exc}")
                finally:
                    self._room.set()
        finally:
            self._sender = None

    async def _send_runs(self, runs: list[list[_Queued]]) -> None:
        encoded = [
            (
                run[0][0],
                *encode_arrow([m[1] for m in run], [m[2] for m in run], [m[3] for m in run]),
            )
            for run in runs
        ]
        if self._one_run_per_call:
            for run in encoded:
                await self._call([run])
            return
        response = await self._call(encoded)
        if len(encoded) > 1 and response.count < sum(c for _, _, c in encoded):
            self._one_run_per_call = True  # it published the first run only
            for run in encoded[1:]:
                await self._call([run])

    def _raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    async def flush(self) -> None:
        """Wait until every queued message was sent; raise the first error since the last flush."""
        while self._sender is not None:
            await asyncio.gather(self._sender, return_exceptions=True)
        self._raise_error()

    async def close(self) -> None:
        """Flush, then refuse further publishes. Idempotent."""
        if self._closed:
            return
        try:
            await self.flush()
        finally:
            self._closed = True

    publish = renamed_method(send, "EphemeralProducer.publish")
    publish_batch = renamed_method(send_batch, "EphemeralProducer.publish_batch")


def _runs(messages: list[_Queued]) -> list[list[_Queued]]:
    """`messages` cut into consecutive runs of one topic each, in order."""
    runs: list[list[_Queued]] = []
    for message in messages:
        if runs and runs[-1][0][0] == message[0]:
            runs[-1].append(message)
        else:
            runs.append([message])
    return runs
