"""A test process can fork with a `preexec_fn` (as PySpark launches its JVM) while
gRPC calls are in flight on its threads, and every child gets to exec.

With gRPC's fork support on (its default), about one such child in ten died of
SIGSEGV or SIGABRT before exec: in CI the Spark fixture's JVM "exited before
sending its port number" and every Spark test of that worker errored.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections import Counter

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tamto_testing.grpc_servers import listen

FORKS = 100


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def fork_many() -> Counter[int]:
    """Exit codes of `FORKS` children forked with a preexec_fn (never vfork)."""
    codes: Counter[int] = Counter()
    for _ in range(FORKS):
        with subprocess.Popen(["true"], preexec_fn=ignore_sigint, stdin=subprocess.PIPE) as child:
            codes[child.wait()] += 1
    return codes


async def keep_calling(stub: health_pb2_grpc.HealthStub, calls: list[int]) -> None:
    while True:
        await asyncio.gather(*(stub.Check(health_pb2.HealthCheckRequest()) for _ in range(20)))
        calls[0] += 20


def test_the_harness_turns_fork_support_off() -> None:
    assert os.environ["GRPC_ENABLE_FORK_SUPPORT"] == "false"


async def test_children_forked_while_grpc_is_busy_all_exec() -> None:
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = listen(server)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            calls = [0]
            caller = asyncio.create_task(keep_calling(health_pb2_grpc.HealthStub(channel), calls))
            codes = await asyncio.to_thread(fork_many)
            caller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await caller
    finally:
        await server.stop(None)
    assert calls[0] > 0, "no gRPC call ran while the children were forked"
    assert codes == Counter({0: FORKS}), f"children's exit codes: {codes}"
