"""`python -m tamto_local.node`: a router and a storage node in one process.

A deployment option (`tamto up --colocate`), not the system's shape: the router
and the storage node are the same services as when they run apart, each with
its own gRPC port, instance id, membership and configuration, in one event
loop. The router calls this storage node in-process (`InProcessStorage`): a
publish's append then crosses no gRPC hop between them, and every other
storage node (a replicated stream's other replicas) is called over gRPC as
usual. The storage node still serves gRPC to everyone else: other routers,
the gateways' reads, `tamto storage` administration.

Both configurations come from the environment, each service's own variables
as when it runs alone (`TAMTO_ROUTER_PORT`, `TAMTO_STORAGE_DATA_DIR`, ...; the
shared `TAMTO_*` ones for both). The trade-off is one failure domain: a crash
takes both down, and with them the partitions this router owns and the copies
this node stores (a replicated stream's other replicas keep its data).

Like the launcher's other processes (`python -m tamto_router`, ...) it needs the
services installed beside the launcher (`pip install 'tamto-cli[server]'`).

SIGTERM or SIGINT stops the router first (it deregisters and drains the calls
in flight, whose appends still reach the storage node), then the storage node.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import signal
import sys

from tamto_common.config import load_config
from tamto_common.errors import ConfigError
from tamto_common.service import Runtime, run, serve
from tamto_local.in_process_storage import InProcessStorage
from tamto_router.config import RouterConfig
from tamto_router.server import setup as setup_router
from tamto_storage.config import StorageConfig
from tamto_storage.server import serve_node

#: What the process calls itself in its logs and errors.
NAME = "node"


async def serve_both(router: RouterConfig, storage: StorageConfig) -> None:
    """Serve the storage node and the router until SIGTERM/SIGINT, then stop them in
    order (module docstring); either one failing to start ends both."""
    local = InProcessStorage()

    async def setup_storage(config: StorageConfig, runtime: Runtime) -> None:
        local.servicer = await serve_node(config, runtime)

    setup = functools.partial(setup_router, local_storage={storage.member_id: local})
    stop_router, stop_storage = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_router.set)
    storage_task = asyncio.create_task(serve("storage", storage, setup_storage, stop_storage))
    router_task = asyncio.create_task(serve("router", router, setup, stop_router))
    try:
        await asyncio.wait((storage_task, router_task), return_when=asyncio.FIRST_COMPLETED)
        if storage_task.done():  # it failed: the router must not serve without it
            router_task.cancel()
            storage_task.result()
            return
        # The router stopped (or failed to start): then the storage node.
        stop_storage.set()
        await storage_task
        router_task.result()
    finally:
        for task in (router_task, storage_task):
            task.cancel()  # nothing, when it ended
        await asyncio.gather(router_task, storage_task, return_exceptions=True)


def main() -> None:
    """The process edge: both configurations from the environment, then `serve_both`."""
    try:
        router = load_config(RouterConfig, "router", [])
        storage = load_config(StorageConfig, "storage", [])
    except ConfigError as exc:
        print(f"tamto-{NAME}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    # Its logs name both instances (`router-1+storage-1`).
    both = dataclasses.replace(router, instance_id=f"{router.member_id}+{storage.member_id}")
    run(NAME, both, lambda: serve_both(router, storage))


if __name__ == "__main__":
    main()
