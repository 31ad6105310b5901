"""Runs `grpc_backlog_server.py` in a process of its own for a test, and stops it after."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from asyncio.subprocess import PIPE, Process
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

SERVER = Path(__file__).with_name("grpc_backlog_server.py")


@dataclass(frozen=True)
class BacklogServer:
    """The server's process and port; `release()` lets its held event loop run."""

    process: Process
    port: int

    async def release(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(b"go\n")
        await self.process.stdin.drain()


@contextlib.asynccontextmanager
async def backlog_server() -> AsyncIterator[BacklogServer]:
    """The server, listening with its event loop held; killed on leaving."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(SERVER), stdin=PIPE, stdout=PIPE
    )
    try:
        assert process.stdout is not None
        yield BacklogServer(process, int(await process.stdout.readline()))
    finally:
        process.kill()
        await process.wait()
