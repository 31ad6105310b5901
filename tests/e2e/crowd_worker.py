"""A crowd of shared consumers in a process of its own (run by tests/e2e/test_crowd.py).

Kept out of the test's process so that the test's publisher measures the
system's latency, not the wait for an event loop busy with thousands of
consumer streams. Usage:

    python -m tests.e2e.crowd_worker ADDRESS TOKEN STREAM COUNT PER_CONNECTION

Opens COUNT consume streams on one shared subscription (`crowd`), each acking
and re-crediting what it receives, spread over connections of PER_CONNECTION
streams; prints `open` once every consumer has sent its subscribe (on its first
stream or on one opened again), `received N` now and then, `retry: ...` when a
stream was reset and is opened again, and `error: ...` if a stream ends
otherwise. On a line `leave` on stdin, whenever it comes (before `open` too),
it cancels every stream, prints `left` and exits. Every 5 s it prints `phases
...`: how many consumers are at each step (`subscribing`: writing the subscribe,
`reading`: waiting for deliveries, `retrying`: between a reset and the next
stream), so that a consumer that never attaches shows where it waits; SIGUSR1
prints (to stderr) the stack of each consumer still subscribing or crediting.
A consumer that fails on anything else prints `error: ...` and ends: never
silently (a write after its stream was reset raised
`InvalidStateError`, which ended the consumer's task unseen, and the crowd
"never attached").
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections import Counter
from collections.abc import Callable

import grpc

from tamto_protocol.v1 import gateway_pb2_grpc, messages_pb2

#: Statuses a consumer retries, as the SDK does: a gRPC server that is slow to
#: accept a burst of new streams resets some of them (the client sees CANCELLED,
#: or INTERNAL for a write racing the reset).
RETRIED = {grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL}

#: How many consumers are at each step (module docstring).
phases: Counter[str] = Counter()

#: Every consumer's `Phase`: SIGUSR1 prints the stacks of those still setting up.
everyone: list[Phase] = []


def print_setting_up() -> None:
    """Print (to stderr) where each consumer still setting up its stream waits."""
    for phase in everyone:
        if phase.now in ("subscribing", "crediting") and phase.task is not None:
            call = phase.call
            done = None if call is None else call.done()
            print(f"consumer in {phase.now}, call done: {done}", file=sys.stderr)
            phase.task.print_stack(file=sys.stderr)


class Phase:
    """One consumer's current step, counted in `phases`."""

    def __init__(self) -> None:
        self.now = "starting"
        phases[self.now] += 1
        self.task = asyncio.current_task()
        self.call: grpc.aio.StreamStreamCall | None = None
        everyone.append(self)

    def to(self, step: str) -> None:
        phases[self.now] -= 1
        phases[step] += 1
        self.now = step


async def consumer(
    stub: gateway_pb2_grpc.GatewayStub,
    token: str,
    stream: str,
    opened: asyncio.Queue[None],
    received: list[int],
) -> None:
    said = False
    phase = Phase()

    def on_open() -> None:
        # Once per consumer, on whichever stream got its subscribe out: a reset
        # first stream must not keep the worker from ever saying `open`.
        nonlocal said
        if not said:
            said = True
            opened.put_nowait(None)

    while True:
        try:
            code, details = await consume(stub, token, stream, on_open, received, phase)
        except Exception as exc:  # never end silently: the test fails on `error:` lines
            phase.to("ended")
            print(f"error: a consumer failed: {exc!r}", flush=True)
            return
        if code not in RETRIED:
            phase.to("ended")
            print(f"error: the stream ended: {code} {details}", flush=True)
            return
        phase.to("retrying")
        print(f"retry: {code} {details}", flush=True)
        await asyncio.sleep(0.1)


async def consume(
    stub: gateway_pb2_grpc.GatewayStub,
    token: str,
    stream: str,
    on_open: Callable[[], None],
    received: list[int],
    phase: Phase,
) -> tuple[grpc.StatusCode, str]:
    """One consume stream until it ends: its status."""
    call = stub.Consume(metadata=[("authorization", f"Bearer {token}")])
    phase.call = call
    subscribe = messages_pb2.Subscribe(
        stream=stream, subscription="crowd", type=messages_pb2.SUBSCRIPTION_TYPE_SHARED
    )
    try:
        phase.to("subscribing")
        await call.write(messages_pb2.ConsumeRequest(subscribe=subscribe))
        phase.to("crediting")
        await call.write(messages_pb2.ConsumeRequest(credit=messages_pb2.Credit(messages=10)))
        on_open()
        phase.to("reading")
        async for response in call:
            if response.WhichOneof("response") == "error":
                # The gateway's status, sent in-band before it ends the stream
                # (messages.proto StreamError): cancelling would hide it as CANCELLED.
                return _status(response.error.code), response.error.message
            d = response.delivery
            last = d.batch.base_offset + d.batch.count - 1
            acks = messages_pb2.PartitionAcks(
                partition=d.partition,
                ranges=[messages_pb2.OffsetRange(first=d.batch.base_offset, last=last)],
            )
            received[0] += d.batch.count
            await call.write(messages_pb2.ConsumeRequest(ack=acks))
            await call.write(
                messages_pb2.ConsumeRequest(credit=messages_pb2.Credit(messages=d.batch.count))
            )
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    except (asyncio.InvalidStateError, grpc.aio.UsageError):
        # A write after the stream ended (gRPC refuses it so, without the status:
        # a stream reset between the subscribe and the credit, the crowd).
        pass  # its status, below, says why it ended
    finally:
        call.cancel()
    return await call.code(), await call.details()


def _status(code: int) -> grpc.StatusCode:
    return next((s for s in grpc.StatusCode if s.value[0] == code), grpc.StatusCode.UNKNOWN)


async def main(address: str, token: str, stream: str, count: int, per_connection: int) -> None:
    own = [("grpc.use_local_subchannel_pool", 1)]
    channels = [
        grpc.aio.insecure_channel(address, options=own) for _ in range(-(-count // per_connection))
    ]
    stubs = [gateway_pb2_grpc.GatewayStub(c) for c in channels]
    opened: asyncio.Queue[None] = asyncio.Queue()
    received = [0]
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    leave = asyncio.create_task(reader.readline())

    async def report_phases() -> None:
        while True:
            await asyncio.sleep(5.0)
            steps = " ".join(f"{k}={v}" for k, v in sorted(phases.items()) if v)
            print(f"phases {steps}", flush=True)

    reporting = asyncio.create_task(report_phases())
    loop.add_signal_handler(signal.SIGUSR1, print_setting_up)
    tasks = []
    for i in range(count):
        stub = stubs[i // per_connection]
        tasks.append(asyncio.create_task(consumer(stub, token, stream, opened, received)))
        if i % 100 == 99:
            await asyncio.sleep(0.05)  # pace the opening: 2,000 streams a second at most

    async def all_open() -> None:
        for _ in range(count):
            await opened.get()
        print("open", flush=True)

    opening = asyncio.create_task(all_open())
    await asyncio.wait({opening, leave}, return_when=asyncio.FIRST_COMPLETED)
    opening.cancel()
    while not leave.done():
        await asyncio.wait({leave}, timeout=1.0)
        print(f"received {received[0]}", flush=True)
    reporting.cancel()
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    print("left", flush=True)
    for channel in channels:
        await channel.close()


if __name__ == "__main__":
    address, token, stream, count, per_connection = sys.argv[1:6]
    asyncio.run(main(address, token, stream, int(count), int(per_connection)))
