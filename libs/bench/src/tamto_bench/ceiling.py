"""The bare architecture ceiling: Arrow batches through three grpc.aio hops to an fsynced file.

Four processes: a client encodes Arrow IPC record batches of 1,000 messages
(Tamto's batch schema) and sends them, several in flight, to hop 1, which
forwards the bytes to hop 2, which forwards them to the sink; the sink appends
them to one file with group commit (everything that arrived while the previous
fsync ran is written and fsynced together) and answers once its bytes are
durable. No authentication, no routing, no sequencing, no dedup, no framing:
what is left when every Tamto semantic is taken away.
"""

from __future__ import annotations

import asyncio
import os
import struct
import time
from typing import Any

import grpc

from tamto_bench.gate import Gate
from tamto_bench.spec import JobResult, JobSpec
from tamto_bench.timing import in_window, wait_for_start
from tamto_protocol.batch import BatchColumns, encode_batch

BATCH_MESSAGES = 1000
_METHOD = "/tamto.bench.Hop/Forward"
_MAX_MESSAGE = 256 * 1024 * 1024
OPTIONS = [
    ("grpc.max_send_message_length", _MAX_MESSAGE),
    ("grpc.max_receive_message_length", _MAX_MESSAGE),
]
#: Servers outlive the client's window by this much, so its last calls complete.
_SERVER_GRACE_S = 3.0


def arrow_batch(size: int, messages: int = BATCH_MESSAGES) -> bytes:
    """One Arrow IPC batch of `messages` messages with `size`-byte payloads."""
    payload = os.urandom(size)
    return encode_batch(
        BatchColumns(
            payloads=[payload] * messages,
            keys=[None] * messages,
            headers=[None] * messages,
            ids=[None] * messages,
            event_times_us=[None] * messages,
        )
    )


def _server(handler: Any, port: int) -> grpc.aio.Server:
    server = grpc.aio.server(options=OPTIONS)
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "tamto.bench.Hop", {"Forward": grpc.unary_unary_rpc_method_handler(handler)}
            ),
        )
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    return server


async def _serve(server: grpc.aio.Server, spec: JobSpec, gate: Gate) -> None:
    await server.start()
    start = await wait_for_start(await gate.ready())
    await asyncio.sleep(max(0.0, start + spec.duration_s + _SERVER_GRACE_S - time.monotonic()))
    await server.stop(grace=1)


async def hop(spec: JobSpec, gate: Gate) -> JobResult:
    """Forward every request's bytes to `spec.target` and relay the answer."""
    async with grpc.aio.insecure_channel(spec.target, options=OPTIONS) as channel:
        forward = channel.unary_unary(_METHOD)

        async def handler(request: bytes, context: Any) -> bytes:
            answer: bytes = await forward(request, wait_for_ready=True)
            return answer

        await _serve(_server(handler, spec.port), spec, gate)
    return JobResult()


class GroupCommit:
    """Appends to one file; every append waits for the fsync of the group it joined."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._queue: list[tuple[bytes, asyncio.Future[int]]] = []
        self._wake = asyncio.Event()
        self._offset = 0
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def append(self, data: bytes) -> int:
        """Write `data`; returns its file offset once it is fsynced."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._queue.append((data, future))
        self._wake.set()
        return await future

    def _write(self, chunks: list[bytes]) -> None:
        for chunk in chunks:
            view = memoryview(chunk)
            while view:
                view = view[os.write(self._fd, view) :]
        os.fsync(self._fd)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            group, self._queue = self._queue, []
            if not group:
                continue
            await asyncio.to_thread(self._write, [data for data, _ in group])
            for data, future in group:
                future.set_result(self._offset)
                self._offset += len(data)

    def close(self) -> None:
        """Stop the writer task."""
        self._task.cancel()


async def sink(spec: JobSpec, gate: Gate) -> JobResult:
    """The last hop: group-committed appends to `spec.path`."""
    fd = os.open(spec.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        commit = GroupCommit(fd)

        async def handler(request: bytes, context: Any) -> bytes:
            return struct.pack("<q", await commit.append(request))

        await _serve(_server(handler, spec.port), spec, gate)
        commit.close()
    finally:
        os.close(fd)
    return JobResult()


async def client(spec: JobSpec, gate: Gate) -> JobResult:
    """Keep `spec.window` batches in flight to hop 1; count messages acked in the window."""
    result = JobResult()
    batch = arrow_batch(spec.size)
    async with grpc.aio.insecure_channel(spec.target, options=OPTIONS) as channel:
        forward = channel.unary_unary(_METHOD)
        # One call through every hop before the window: all four processes are up.
        await forward(batch, wait_for_ready=True, timeout=60)
        start = await wait_for_start(await gate.ready())
        end = start + spec.duration_s
        result.started = time.time()

        async def sender() -> None:
            while time.monotonic() < end:
                await forward(batch)
                result.total += BATCH_MESSAGES
                if in_window(start, end):
                    result.in_window += BATCH_MESSAGES

        await asyncio.gather(*(sender() for _ in range(spec.window)))
        result.last = time.time()
    return result


JOBS = {"client": client, "hop": hop, "sink": sink}
