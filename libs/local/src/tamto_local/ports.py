"""Free loopback ports for servers started by the launcher, tests and benchmarks.

Ports come from below the kernel's ephemeral range. A port the OS picks for
`bind(0)` lies *inside* that range, where every outgoing connection also takes
its local port: on a busy test machine a client's connection could take the
port between the moment it was found free and the moment the server binds it
(or when a killed server restarts on it). Below the range only listeners
compete, and this process never hands out the same port twice.

Several processes that each hand out ports (parallel test workers) could still pick
the same one between its check and its bind: `TAMTO_PORT_RANGE` ("low-high") narrows
the ports this process and the processes it starts hand out, and `worker_port_range`
gives each of N workers a range of its own.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

_LOWEST = 20_000
_FALLBACK_EPHEMERAL_START = 32_768
_handed_out: set[int] = set()
PORT_RANGE_VARIABLE = "TAMTO_PORT_RANGE"


def _ephemeral_start() -> int:
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        return int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return _FALLBACK_EPHEMERAL_START


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def worker_port_range(index: int, count: int) -> tuple[int, int]:
    """The ports, [low, high], of worker `index` of `count`: the space below the
    ephemeral range cut into `count` disjoint slices."""
    if not 0 <= index < count:
        raise ValueError(f"worker {index} of {count}")
    high = _ephemeral_start() - 1
    width = (high - _LOWEST + 1) // count
    low = _LOWEST + index * width
    return low, low + width - 1


def _port_range() -> tuple[int, int]:
    """[low, high]: `TAMTO_PORT_RANGE` when set, else everything below the ephemeral range."""
    text = os.environ.get(PORT_RANGE_VARIABLE)
    if text:
        low, _, high = text.partition("-")
        return int(low), int(high)
    return _LOWEST, _ephemeral_start() - 1


def reserve(*ports: int) -> None:
    """Never hand out `ports`: chosen elsewhere (say by the user), they are bound later,
    after this process has looked for free ports, and would look free until then."""
    _handed_out.update(ports)


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free now, outside the ephemeral range where possible."""
    low, high = _port_range()
    if high - low >= 500:
        for _ in range(200):
            port = random.randint(low, high)
            if port not in _handed_out and _bindable(host, port):
                _handed_out.add(port)
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))  # no room below the ephemeral range: let the OS pick
        return int(sock.getsockname()[1])
