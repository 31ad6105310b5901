"""Unit tests of `tamto_sdk.sender`: ids, publishing and outcomes, against a fake
`Calls` (the wire and retries are covered by the producer and e2e tests)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tamto_protocol.batch import decode_batch
from tamto_protocol.v1 import gateway_pb2
from tamto_sdk._calls import Calls
from tamto_sdk.accumulator import Accumulator
from tamto_sdk.errors import Closed, Internal, Unavailable
from tamto_sdk.messages import PublishResult
from tamto_sdk.sender import Sender
from tamto_testing.waiting import eventually

_DEADLINE_S = 30.0


class _FakeCalls:
    """Answers publishes as a gateway would, or with what a test queued."""

    def __init__(self) -> None:
        self.publish_raw = object()
        self.direct = None  # through the gateway only (`ClientOptions.direct` off)
        self.requests: list[gateway_pb2.PublishRequest] = []
        self.deduplicated: list[bool] = []
        self.answers: list[Any] = []
        self.next_offset = 0
        self.hold: asyncio.Event | None = None
        self.tasks: list[str] = []  # the task each publish ran in

    async def unary(
        self, method: object, request: Callable[[int], bytes], *, deduplicated: bool
    ) -> Any:
        assert method is self.publish_raw
        self.deduplicated.append(deduplicated)
        task = asyncio.current_task()
        self.tasks.append(task.get_name() if task is not None else "")
        if self.hold is not None:
            await self.hold.wait()
        sent = gateway_pb2.PublishRequest.FromString(request(1))
        self.requests.append(sent)
        if self.answers:
            answer = self.answers.pop(0)
            if isinstance(answer, BaseException):
                raise answer
            return answer
        base = self.next_offset
        self.next_offset += sent.batch.count
        return SimpleNamespace(
            partition=sent.partition, base_offset=base, count=sent.batch.count, offsets=[]
        )


def _producer(
    *, idempotent: bool = True, linger_ms: float = 0
) -> tuple[Accumulator, Sender, _FakeCalls]:
    calls = _FakeCalls()
    senders: list[Sender] = []
    accumulator = Accumulator(
        "s",
        linger_s=linger_ms / 1000,
        max_batch_messages=1000,
        max_batch_bytes=4 << 20,
        max_pending_messages=100_000,
        on_partition=lambda partition: senders[0].start(partition),
    )
    sender = Sender(
        cast(Calls, calls), accumulator, "s", producer_name="prod", idempotent=idempotent
    )
    senders.append(sender)
    accumulator.start(1, asyncio.get_running_loop())
    return accumulator, sender, calls


def _send(
    accumulator: Accumulator, payload: bytes, id: str | None = None
) -> asyncio.Future[PublishResult]:
    return accumulator.add(payload, None, None, id, None, id is None)


async def test_published_batches_resolve_their_futures_with_the_acked_offsets() -> None:
    accumulator, sender, calls = _producer()
    calls.next_offset = 10
    futures = [_send(accumulator, f"m{i}".encode()) for i in range(3)]
    results = await asyncio.wait_for(asyncio.gather(*futures), _DEADLINE_S)
    assert [r.offset for r in results] == [10, 11, 12]
    assert accumulator.pending == 0
    (request,) = calls.requests
    assert (request.stream, request.partition, request.batch.count) == ("s", 0, 3)
    await sender.close()


async def test_generated_ids_continue_across_batches_and_keep_given_ones() -> None:
    accumulator, sender, calls = _producer()
    first = [_send(accumulator, b"a"), _send(accumulator, b"b", id="given")]
    await asyncio.wait_for(asyncio.gather(*first), _DEADLINE_S)
    await asyncio.wait_for(_send(accumulator, b"c"), _DEADLINE_S)
    ids = [decode_batch(r.batch.arrow_ipc).column("id").to_pylist() for r in calls.requests]
    prefix = sender.producer_id
    assert prefix.startswith("prod-")
    assert ids == [[f"{prefix}:0", "given"], [f"{prefix}:1"]]
    assert calls.deduplicated == [True, True]  # every message has an id: resends are safe
    await sender.close()


async def test_without_idempotence_no_ids_are_made_and_a_resend_is_not_safe() -> None:
    accumulator, sender, calls = _producer(idempotent=False)
    await asyncio.wait_for(_send(accumulator, b"a"), _DEADLINE_S)
    await asyncio.wait_for(_send(accumulator, b"b", id="mine"), _DEADLINE_S)
    ids = [decode_batch(r.batch.arrow_ipc).column("id").to_pylist() for r in calls.requests]
    assert ids == [[None], ["mine"]]
    assert calls.deduplicated == [False, True]
    await sender.close()


async def test_offsets_of_recognised_duplicates_come_from_the_response() -> None:
    accumulator, sender, calls = _producer()
    calls.answers.append(SimpleNamespace(partition=0, base_offset=0, count=0, offsets=[7, 3]))
    futures = [_send(accumulator, b"a"), _send(accumulator, b"b")]
    results = await asyncio.wait_for(asyncio.gather(*futures), _DEADLINE_S)
    assert [r.offset for r in results] == [7, 3]
    await sender.close()


@pytest.mark.parametrize(
    ("answer", "error", "match"),
    [
        (Unavailable("router moving"), Unavailable, "router moving"),
        (SimpleNamespace(partition=0, base_offset=0, count=5, offsets=[]), Internal, "5 acked"),
        (RuntimeError("bug"), Internal, "unexpected error while publishing"),
    ],
)
async def test_a_failed_publish_fails_its_futures_and_the_partition_goes_on(
    answer: Any, error: type[Exception], match: str
) -> None:
    accumulator, sender, calls = _producer()
    calls.answers.append(answer)
    failed = _send(accumulator, b"a")
    with pytest.raises(error, match=match):
        await asyncio.wait_for(failed, _DEADLINE_S)
    after = await asyncio.wait_for(_send(accumulator, b"b"), _DEADLINE_S)
    assert after.partition == 0
    assert accumulator.pending == 0
    await sender.close()


async def test_close_fails_the_batch_in_flight_with_closed() -> None:
    accumulator, sender, calls = _producer()
    calls.hold = asyncio.Event()  # the publish never returns
    in_flight = _send(accumulator, b"a")
    await eventually(lambda: bool(calls.deduplicated), _DEADLINE_S, "the publish to start")
    await asyncio.wait_for(sender.close(), _DEADLINE_S)
    with pytest.raises(Closed):
        in_flight.result()
    assert accumulator.pending == 0


async def test_with_one_in_flight_the_partitions_task_publishes_itself() -> None:
    """The default (one batch in flight) publishes in the partition's sender task, not
    in a task started per batch; the batches still go one after another, in order."""
    accumulator, sender, calls = _producer()
    for i in range(3):
        result = await asyncio.wait_for(_send(accumulator, f"m{i}".encode()), _DEADLINE_S)
        assert result.offset == i
    assert calls.tasks == ["tamto-producer-s-0"] * 3
    await sender.close()
