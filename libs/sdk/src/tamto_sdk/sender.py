"""The producer's sender: publishes the accumulator's batches, one partition at a time.

Each partition that has had a batch gets one task that takes its next due batch
from the accumulator (`Accumulator.ready`), publishes it and reports the outcome
(`Accumulator.finish`), so a partition has at most one batch in flight and its
order holds. As aiokafka's ``Sender``, this is where a batch meets the network:

- idempotence: every message without an id gets ``<producer id>:<sequence>``
  when its batch is encoded, once, so a resend carries the same ids and the
  server's dedup window stores it at most once;
- retries: `Calls.unary` retries what `tamto_sdk.errors` marks retriable until
  `ClientOptions.retry_deadline_s`; with ids on every message a call cut off
  mid-flight is retriable too (`from_rpc_error(deduplicated=True)`);
- the direct path (`ClientOptions.direct`): a batch goes straight to the router
  owning its partition (`tamto_sdk.direct`), through the gateway when it cannot;
- reconnecting: the pipelined publish stream (`tamto_protocol.pipelined`) and the
  channel's reconnect backoff re-establish the connection under a retried call.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from tamto_protocol.wire import publish_request
from tamto_sdk._calls import Calls
from tamto_sdk.accumulator import Accumulator, ProducerBatch
from tamto_sdk.columns import encode, with_ids
from tamto_sdk.errors import Closed, Internal, InvalidArgument, TamtoError

__all__ = ["Sender"]


class Sender:
    """Publishes one stream's batches from an `Accumulator`, a task per partition."""

    def __init__(
        self,
        calls: Calls,
        accumulator: Accumulator,
        stream: str,
        *,
        producer_name: str | None,
        idempotent: bool,
    ) -> None:
        self._calls = calls
        self._accumulator = accumulator
        self._stream = stream
        self._producer_name = producer_name
        self._idempotent = idempotent
        #: The prefix of the ids this producer generates: unique per producer instance.
        self.producer_id = f"{producer_name or 'p'}-{uuid.uuid4().hex[:12]}"
        self._sequence = 0
        self._tasks: dict[int, asyncio.Task[None]] = {}

    def start(self, partition: int) -> None:
        """Start `partition`'s sender task (the accumulator has a queue for it)."""
        if partition not in self._tasks:
            self._tasks[partition] = asyncio.get_running_loop().create_task(
                self._run(partition), name=f"tamto-producer-{self._stream}-{partition}"
            )

    async def close(self) -> None:
        """Stop every partition's task; what they had not published fails with `Closed`."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self, partition: int) -> None:
        """Take the partition's next due batch, publish it, repeat."""
        accumulator = self._accumulator
        batch: ProducerBatch | None = None
        try:
            while True:
                batch = await accumulator.ready(partition)
                accumulator.finish(batch, await self._publish(partition, batch))
                batch = None
        except asyncio.CancelledError:
            error = Closed("producer closed before the message was published")
            accumulator.abort(partition, batch, error)
            raise

    def encode(self, batch: ProducerBatch) -> tuple[pa.Buffer, bool]:
        """The batch in Arrow IPC form, and whether every message has an id (so the
        server deduplicates a resend of it)."""
        key, payload, headers, ids, event_time = batch.columns()
        if self._idempotent:
            missing = ids.null_count
            ids = with_ids(ids, self.producer_id, self._sequence)
            self._sequence += missing
        encoded = encode((key, payload, headers, ids, event_time), self._producer_name)
        return encoded, ids.null_count == 0

    async def _publish(self, partition: int, batch: ProducerBatch) -> TamtoError | None:
        """Publish `batch`; resolve its futures and return None, or return the error."""
        try:
            try:
                arrow_ipc, deduplicated = self.encode(batch)
            except Exception as exc:
                raise InvalidArgument(f"cannot encode batch: {exc}") from exc
            count = batch.count
            stream = self._stream

            def request(call_id: int) -> bytes:
                # In wire form: the Arrow bytes are copied once, not three times.
                return publish_request(stream, partition, arrow_ipc, count, call_id)

            # Straight to the partition's owner when the client may (`ClientOptions.direct`,
            # `tamto_sdk.direct`) and a resend is safe; None: through the gateway.
            direct = self._calls.direct
            response: Any = None
            if direct is not None and deduplicated:
                response = await direct.publish(stream, partition, request)
            if response is None:
                # With ids on every message, a send cut off mid-call is retried too: the
                # server's dedup window recognises it if the first one was stored.
                response = await self._calls.unary(
                    self._calls.publish_raw, request, deduplicated=deduplicated
                )
            if int(response.count) not in (0, count):
                raise Internal(f"published {count} messages but {response.count} acked")
            base = int(response.base_offset)
            # Set when the server recognised duplicates: every message's own offset.
            offsets: Sequence[int] = list(response.offsets) or range(base, base + count)
            if len(offsets) != count:
                raise Internal(f"published {count} messages but got {len(offsets)} offsets")
            batch.resolve(stream, int(response.partition), offsets)
        except TamtoError as exc:
            return exc
        except Exception as exc:  # a bug must not leave futures hanging
            return Internal(f"unexpected error while publishing: {exc!r}")
        return None
