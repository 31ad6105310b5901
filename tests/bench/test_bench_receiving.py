"""The one consume loop of the benchmark's subscribers (`tamto_bench.receiving`): what it
counts, which latencies it keeps and that it acks every batch, with a fake consumer."""

from __future__ import annotations

import asyncio
import time

from tamto_bench.gate import Gate
from tamto_bench.receiving import consume_loop
from tamto_bench.spec import JobResult, JobSpec


class StartNow(Gate):
    def __init__(self) -> None:
        self.start = 0.0

    async def ready(self) -> float:
        self.start = time.time()
        return self.start


async def test_counts_every_batch_keeps_latencies_after_the_warm_up_and_acks() -> None:
    spec = JobSpec("tamto", "sub", "", "s", 8, duration_s=0.5, idle_s=0.1, latency=True)
    # Two batches of send times: one stamped before the window opened (in the warm-up:
    # dropped), one stamped when it arrives, once the warm-up (the first 0.1 s) is over.
    gate = StartNow()
    pending = [2, 3]
    acked: list[list[int]] = []

    async def receive(timeout_s: float) -> list[int]:
        assert 0 < timeout_s <= 0.2
        if len(pending) == 2:
            return [int((gate.start - 1) * 1e9)] * pending.pop(0)
        if pending and time.time() > gate.start + 0.2:
            return [time.time_ns()] * pending.pop(0)
        return []

    async def ack(batch: list[int]) -> None:
        acked.append(batch)

    def sequenced(batch: list[int]) -> int:
        return batch[0] + 1_000_000  # the server sequenced it 1 ms after its send

    result = JobResult()
    await consume_loop(spec, gate, result, receive, ack, lambda batch: batch, sequenced)

    assert result.total == 5
    assert [len(b) for b in acked] == [2, 3]
    assert len(result.latencies_ns) == 3, "the warm-up's samples are dropped"
    assert all(0 <= ns < 10 * 10**9 for ns in result.latencies_ns)
    assert [ns + 1_000_000 for ns in result.deliver_side_ns] == result.latencies_ns
    assert result.started > 0
    assert result.last >= result.started


async def test_without_latency_it_stops_once_the_stream_stays_quiet() -> None:
    spec = JobSpec("jetstream", "sub", "", "s", 8, duration_s=60, idle_s=0.1)
    pending = [[1, 2, 3]]

    async def receive(timeout_s: float) -> list[int]:
        return pending.pop(0) if pending else []

    async def ack(batch: list[int]) -> None:
        pass

    def no_stamps(batch: list[int]) -> list[int]:
        raise AssertionError("send times are read only with latency")

    def not_sequenced(batch: list[int]) -> int:
        raise AssertionError("sequencing times are read only with latency")

    result = JobResult()
    began = time.monotonic()
    await consume_loop(spec, StartNow(), result, receive, ack, no_stamps, not_sequenced)
    assert result.total == 3
    assert result.latencies_ns == []
    assert result.deliver_side_ns == []
    assert time.monotonic() - began < 30, "drained: it did not wait out the 60 s window"


async def test_ack_counter_counts_acks_in_and_out_of_the_window_and_errors() -> None:
    result = JobResult()
    now = time.monotonic()
    inside = result.ack_counter(now - 60, now + 60, count=3)
    outside = result.ack_counter(now - 60, now - 30)
    loop = asyncio.get_running_loop()
    acked, failed, cancelled, late = (loop.create_future() for _ in range(4))
    acked.set_result(None)
    failed.set_exception(RuntimeError("refused"))
    cancelled.cancel()
    late.set_result(None)
    for future in (acked, failed, cancelled):
        inside(future)
    outside(late)
    assert (result.total, result.in_window, result.errors) == (3 + 1, 3, 3 + 3)
