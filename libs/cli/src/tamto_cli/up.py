"""`tamto up`: the local launcher, with an optional demo."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import signal

from rich.console import Console
from rich.text import Text

from tamto_local.cluster import ClusterConfig, LaunchError, LocalCluster

COLORS = {
    "etcd": "cyan",
    "nats": "magenta",
    "auth": "yellow",
    "storage": "green",
    "router": "blue",
    "node": "bright_green",
    "gateway": "bright_red",
}


async def run_up(
    config: ClusterConfig,
    console: Console,
    demo: bool,
    once: bool,
    quiet: bool,
    as_json: bool = False,
    netns: bool = False,
) -> int:
    """Start the local system, print how to reach it, wait for Ctrl-C. With `as_json`
    `console` is stderr's, and stdout gets one JSON object once every service is up.
    With `netns` each node's storage node and router run in a network namespace of
    their own (`tamto_local.netlab`, deleted on the way out), the rest on its bridge."""
    async with contextlib.AsyncExitStack() as stack:
        if netns:
            from tamto_local.netlab import NetworkLab

            lab = await stack.enter_async_context(NetworkLab(config.nodes))
            config = dataclasses.replace(config, host=lab.root_address, placed=lab.placement())
            console.print(
                "network namespaces (cut links with `ip netns exec <ns> iptables ...`): "
                + ", ".join(f"{ns} ({lab.address(i + 1)})" for i, ns in enumerate(lab.namespaces))
            )
        return await _run(config, console, demo, once, quiet, as_json)


async def _run(
    config: ClusterConfig, console: Console, demo: bool, once: bool, quiet: bool, as_json: bool
) -> int:
    """`run_up` once the network (if any) is in place."""

    def sink(name: str, line: str) -> None:
        if not quiet:
            style = COLORS.get(name.partition("-")[0], "white")
            prefix = Text(f"{name:>9} | ", style=style)
            console.print(prefix + Text(line), soft_wrap=True, highlight=False)

    def notify(message: str) -> None:
        console.print(f"[bold]launcher[/] | {message}", highlight=False)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    cluster = LocalCluster(config, sink, notify)
    try:
        started = loop.time()
        await cluster.start()
        notify(f"all services healthy in {loop.time() - started:.1f}s")
        console.print(f"[bold green]Tamto is up.[/] gateway: {config.gateway_url}")
        if config.colocate:
            console.print("each node's router and storage node run as one process (node)")
        if config.nodes > 1:
            console.print(
                f"{config.nodes} storage nodes, {config.nodes} routers; gateways: "
                + ", ".join(cluster.gateway_urls())
            )
        console.print(f"HTTP API: {', '.join(cluster.http_urls())} (docs/http.md)")
        console.print(f"MQTT: {', '.join(cluster.mqtt_addresses())} (docs/mqtt.md)")
        console.print(f"development API key: [bold]{cluster.credential}[/]")
        console.print(f"data directory: {config.data_dir.resolve()}")
        console.print(
            f"cluster secret (every node joins with it): {config.data_dir.resolve()}/cluster-secret"
        )
        ca = None
        if config.tls:
            ca = (config.tls_dir / "ca.pem").read_bytes()
            console.print(f"TLS on every port; development CA: {config.tls_dir / 'ca.pem'}")
        if as_json:
            ready = {
                "gateway": config.gateway_url,
                "gateways": list(cluster.gateway_urls()),
                "http": list(cluster.http_urls()),
                "mqtt": list(cluster.mqtt_addresses()),
                "api_key": cluster.credential,
                "data_dir": str(config.data_dir.resolve()),
                "ca_file": str(config.tls_dir / "ca.pem") if config.tls else None,
            }
            print(json.dumps(ready), flush=True)
        if demo:
            from tamto_cli.demo import run_demo  # the SDK (pyarrow): only for the demo

            await run_demo(config.gateway_url, cluster.credential, console, ca)
        if not once:
            console.print("press Ctrl-C to stop")
            await stop.wait()
        return 0
    except LaunchError as exc:
        console.print(f"[bold red]tamto up: {exc}[/]")
        return 1
    finally:
        notify("stopping")
        await cluster.stop()
