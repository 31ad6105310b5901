"""Test servers never listen on a port the OS picks.

A port from `bind(0)` can come round again within one test worker, and gRPC shares a
subchannel per address across the process: a new channel to the new server then
inherits an old channel's "connection refused" (`tamto_testing.grpc_servers`). Test
code listens through `tamto_testing.grpc_servers.listen`, whose ports are never
handed out twice in a process.
"""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
TEST_CODE = ["libs/*/tests/**/*.py", "services/*/tests/**/*.py", "tests/**/*.py"]
PORT_ZERO = re.compile(r"""add_(?:insecure|secure)_port\(\s*f?["'][^"']*:0["']""")


def port_zero_listeners() -> list[str]:
    found = []
    for pattern in TEST_CODE:
        for path in sorted(ROOT.glob(pattern)):
            if path == HERE:
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if PORT_ZERO.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def test_the_pattern_finds_a_port_zero_listener() -> None:
    assert PORT_ZERO.search('port = server.add_insecure_port("127.0.0.1:0")')
    assert not PORT_ZERO.search('server.add_insecure_port(f"127.0.0.1:{port}")')


def test_no_test_server_listens_on_a_port_the_os_picks() -> None:
    assert port_zero_listeners() == []
