"""Free loopback ports for servers started by the launcher, tests and benchmarks.

Ports come from below the kernel's ephemeral range. A port the OS picks for
`bind(0)` lies *inside* that range, where every outgoing connection also takes
its local port: on a busy test machine a client's connection could take the
port between the moment it was found free and the moment the server binds it
(or when a killed server restarts on it). Below the range only listeners
compete, and this process never hands out the same port twice.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_LOWEST = 20_000
_FALLBACK_EPHEMERAL_START = 32_768
_handed_out: set[int] = set()


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


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free now, outside the ephemeral range where possible."""
    high = _ephemeral_start() - 1
    if high - _LOWEST >= 1_000:
        for _ in range(200):
            port = random.randint(_LOWEST, high)
            if port not in _handed_out and _bindable(host, port):
                _handed_out.add(port)
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))  # no room below the ephemeral range: let the OS pick
        return int(sock.getsockname()[1])
