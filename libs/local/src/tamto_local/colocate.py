"""The launcher's side of co-located nodes (`tamto up --colocate`).

Each node's router and storage node run as one process (`tamto_local.node`),
named `node`, `node-2`, ... in place of `storage`/`router` (`colocated`). The
process gets both services' environments (`node_env`): each keeps its own port,
instance id (`storage-<i>`, `router-<i>`) and data directory, the same as when
they run apart, so a data directory can be started either way. The launcher
waits until both of its ports serve.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping

#: The process name of a co-located node (with `-<i>` from the second node on).
NODE = "node"
#: The services a co-located node runs, each on a port of its own.
COLOCATED = ("storage", "router")


def colocated(names: list[str]) -> list[str]:
    """`names` (`tamto_local.layout.node_processes`) with each node's storage node and
    router replaced by one co-located node, where its storage node started."""
    out: list[str] = []
    for name in names:
        service, _, index = name.partition("-")
        if service == "storage":
            out.append(f"{NODE}-{index}" if index else NODE)
        elif service != "router":
            out.append(name)
    return out


def is_node(name: str) -> bool:
    """Whether process `name` is a co-located node."""
    return name.partition("-")[0] == NODE


def part(name: str, service: str) -> str:
    """The process name `service` would have apart: ("node-2", "router") -> "router-2"."""
    index = name.partition("-")[2]
    return f"{service}-{index}" if index else service


def node_env(name: str, env_of: Callable[[str], Mapping[str, str]]) -> dict[str, str]:
    """The environment of co-located node `name`: each service's own (`env_of` the
    process name it would have apart), the data directory as each one's own setting."""
    env: dict[str, str] = {}
    for service in COLOCATED:
        own = dict(env_of(part(name, service)))
        own[f"TAMTO_{service.upper()}_DATA_DIR"] = own.pop("TAMTO_DATA_DIR")
        env.update(own)
    return env


def node_argv() -> list[str]:
    return [sys.executable, "-m", "tamto_local.node"]
