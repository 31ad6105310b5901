"""Network namespaces for a local cluster's nodes, to cut and delay links between them.

`tamto chaos --network` needs nodes that lose touch with each other while their
processes keep running. `NetworkLab(n)` makes a bridge in the root namespace and
n network namespaces, each joined to the bridge by a veth pair, on a /24 of
10.232.0.0/16 that no interface uses yet: the bridge has `root_address` (etcd,
NATS, the gateways and the clients bind it), node i's namespace `address(i)` (its
storage node and router bind that, started with `argv_prefix(i)`). Every node
reaches every other and the root over the bridge.

Faults are iptables rules inside one node's namespace: `isolate(i)` drops all its
traffic over its veth; `drop(i, address, port, inbound=...)` drops what it sends to
an address (one TCP port of it, or all), and with `inbound` what it receives from
there too (without: an asymmetric cut); `delay(i, ms)` delays its TCP over the veth,
both ways, through `tamto_local.delay_proxy` running in the namespace (this
machine's kernel has no sch_netem); `heal(i)` removes node i's cuts and delays.

Only what the lab made is touched: its names carry a random token per lab, and
leaving the `async with` block (also on failure) stops the proxies and deletes the
namespaces (their rules go with them), the veths, the bridge and the one root rule
(a FORWARD accept for the bridge, in case bridged traffic is filtered there).
Root and `ip`, `iptables`, `ss` are needed: `unavailable()` says why not.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import secrets
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Self

from tamto_local.delay_proxy import MARK
from tamto_local.delay_proxy_control import ProxyControl

#: Where the labs' /24s come from (`tamto_testing.netns` uses 10.231.0.0/16).
SUBNET = ipaddress.ip_network("10.232.0.0/16")
#: Attempts at picking a free /24.
PICK_ATTEMPTS = 20
#: The most nodes a lab holds (addresses .10 up in its /24).
MAX_LAB_NODES = 200
#: The services of a cluster node that run in its namespace (`NetworkLab.placement`).
NODE_SERVICES = ("storage", "router")


class NetlabError(RuntimeError):
    """A command failed; the message has the command and its stderr."""


def unavailable() -> str | None:
    """Why this machine cannot run a network lab (None: it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (euid is not 0)"
    for tool in ("ip", "iptables", "ss"):
        if shutil.which(tool) is None:
            return f"network faults need the `{tool}` tool on PATH"
    return None


def _pick_subnet() -> ipaddress.IPv4Network:
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    used = {
        ipaddress.IPv4Interface(parts[parts.index("inet") + 1]).network
        for parts in (line.split() for line in out.splitlines())
        if "inet" in parts
    }
    for _ in range(PICK_ATTEMPTS):
        index = secrets.randbelow(2 ** (24 - SUBNET.prefixlen))
        net = ipaddress.IPv4Network((int(SUBNET.network_address) + 256 * index, 24))
        if not any(net.overlaps(u) for u in used):
            return net
    raise NetlabError(f"no free /24 in {SUBNET} after {PICK_ATTEMPTS} attempts")


class MadeForBlock:
    """Mixin: what `_create` makes for an `async with` block and `_delete` deletes on
    leaving it, and at once if making it fails part way (`_delete` then deletes as
    much as there is, ignoring what is not there)."""

    _created = False

    async def _create(self) -> None:
        raise NotImplementedError

    async def _delete(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        self._created = True  # from the first command on, exit cleans up
        try:
            await self._create()
        except BaseException:
            await self._deleted()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._deleted()

    async def _deleted(self) -> None:
        if self._created:
            self._created = False
            await self._delete()


@dataclass
class _Node:
    namespace: str
    root_veth: str
    inner_veth: str
    address: str
    proxy: ProxyControl | None = None


class NetworkLab(MadeForBlock):
    """A bridge and `nodes` namespaces, for an `async with` block (see the module)."""

    def __init__(self, nodes: int) -> None:
        if not 1 <= nodes <= MAX_LAB_NODES:
            raise ValueError(f"a lab holds 1-{MAX_LAB_NODES} nodes, not {nodes}")
        token = secrets.token_hex(3)
        self.token = token
        self.bridge = f"tb{token}"
        self.network = _pick_subnet()
        self.root_address = str(self.network.network_address + 1)
        self._nodes = [
            _Node(
                f"tamto-{token}-{i}",
                f"tv{token}{i}r",  # interface names: 15 characters at most
                f"tv{token}{i}n",
                str(self.network.network_address + 9 + i),
            )
            for i in range(1, nodes + 1)
        ]

    def address(self, node: int) -> str:
        """Node `node`'s (1-based) address, inside its namespace."""
        return self._nodes[node - 1].address

    def argv_prefix(self, node: int) -> tuple[str, ...]:
        """Prepend to a command to run it in node `node`'s namespace."""
        return ("ip", "netns", "exec", self._nodes[node - 1].namespace)

    def placement(self) -> dict[str, tuple[str, tuple[str, ...]]]:
        """Where each node's storage node and router run (`ClusterConfig.placed`): node
        i's processes (`storage`, `router` for node 1, `storage-i`, `router-i` after, as
        `tamto_local.layout.node_processes` names them) in its namespace, on its address."""
        return {
            (service if i == 1 else f"{service}-{i}"): (self.address(i), self.argv_prefix(i))
            for i in range(1, len(self._nodes) + 1)
            for service in NODE_SERVICES
        }

    @property
    def namespaces(self) -> list[str]:
        return [n.namespace for n in self._nodes]

    async def _create(self) -> None:
        await run("ip", "link", "add", self.bridge, "type", "bridge")
        await run("ip", "addr", "add", f"{self.root_address}/24", "dev", self.bridge)
        await run("ip", "link", "set", self.bridge, "up")
        await run("iptables", "-I", "FORWARD", *self._forward_rule())
        for node in self._nodes:
            await self._add(node)

    def _forward_rule(self) -> list[str]:
        comment = ["-m", "comment", "--comment", f"tamto-{self.token}"]
        return ["-i", self.bridge, "-o", self.bridge, *comment, "-j", "ACCEPT"]

    async def _add(self, node: _Node) -> None:
        await join_namespace(
            node.namespace,
            (node.root_veth, node.inner_veth),
            f"{node.address}/24",
            ("link", "set", node.root_veth, "master", self.bridge),
        )

    async def isolate(self, i: int) -> None:
        """Drop everything node `i` sends or receives over its veth."""
        node = self._nodes[i - 1]
        await _in(node, "iptables", "-I", "OUTPUT", "-o", node.inner_veth, "-j", "DROP")
        await _in(node, "iptables", "-I", "INPUT", "-i", node.inner_veth, "-j", "DROP")

    async def drop(self, i: int, address: str, port: int | None = None, *, inbound: bool) -> None:
        """Drop what node `i` sends to `address` (TCP to `port` only, if given), and with
        `inbound` what it receives from there (TCP from `port`) too."""
        node = self._nodes[i - 1]
        out = ["-d", address, *(["-p", "tcp", "--dport", str(port)] if port else [])]
        await _in(node, "iptables", "-I", "OUTPUT", "-o", node.inner_veth, *out, "-j", "DROP")
        if inbound:
            into = ["-s", address, *(["-p", "tcp", "--sport", str(port)] if port else [])]
            await _in(node, "iptables", "-I", "INPUT", "-i", node.inner_veth, *into, "-j", "DROP")

    async def delay(self, i: int, ms: int) -> None:
        """Delay node `i`'s TCP over its veth by `ms` each way (its connections to and
        from the others and the root), until `heal(i)`.

        Through the delay proxy, which stays in the path once started (removing its
        rules would reset the connections through it): the first delay resets the
        node's open connections over the veth so that they reconnect through it."""
        if ms < 0:
            raise ValueError(f"a delay is 0 ms or more, not {ms}")
        node = self._nodes[i - 1]
        if node.proxy is not None:
            await node.proxy.set_delay(ms)
            return
        node.proxy = await ProxyControl.start(self.argv_prefix(i))
        await node.proxy.set_delay(ms)
        redirect = ["-j", "REDIRECT", "--to-ports", str(node.proxy.port)]
        not_proxy = ["-m", "mark", "!", "--mark", hex(MARK)]
        out = ["-o", node.inner_veth, "-p", "tcp"]
        await _in(node, "iptables", "-t", "nat", "-A", "OUTPUT", *out, *not_proxy, *redirect)
        into = ["-i", node.inner_veth, "-p", "tcp"]
        await _in(node, "iptables", "-t", "nat", "-A", "PREROUTING", *into, *redirect)
        # Connections opened before the rules bypass the proxy: reset them (not the
        # proxy's own, nor those within the namespace).
        await _in(node, "ss", "-t", "-n", "-K", "dst", str(self.network), "and", "not", "dst",
                  node.address, "and", "fwmark", "!=", hex(MARK))  # fmt: skip

    async def heal(self, i: int) -> None:
        """Remove node `i`'s cuts and delays."""
        node = self._nodes[i - 1]
        await _in(node, "iptables", "-F", "INPUT")
        await _in(node, "iptables", "-F", "OUTPUT")
        if node.proxy is not None:
            await node.proxy.set_delay(0)

    async def _delete(self) -> None:
        for node in self._nodes:
            if node.proxy is not None:  # its process would keep the namespace alive
                await node.proxy.stop()
                node.proxy = None
            await leave_namespace(node.namespace, node.root_veth)
        await run("ip", "link", "del", self.bridge, check=False)
        await run("iptables", "-D", "FORWARD", *self._forward_rule(), check=False)


async def join_namespace(
    namespace: str, veths: tuple[str, str], address: str, attach_root: Sequence[str]
) -> None:
    """Make network namespace `namespace` joined to the root one by the veth pair
    `veths` (root end, end moved into the namespace): `attach_root` (the arguments of
    an `ip` command) places the root end, then both ends come up, the inner one with
    `address` (CIDR), and so does the namespace's loopback."""
    root_veth, inner_veth = veths
    await run("ip", "netns", "add", namespace)
    await run("ip", "link", "add", root_veth, "type", "veth", "peer", "name", inner_veth)
    await run("ip", "link", "set", inner_veth, "netns", namespace)
    await run("ip", *attach_root)
    await run("ip", "link", "set", root_veth, "up")
    inside = ("ip", "netns", "exec", namespace)
    await run(*inside, "ip", "addr", "add", address, "dev", inner_veth)
    await run(*inside, "ip", "link", "set", inner_veth, "up")
    await run(*inside, "ip", "link", "set", "lo", "up")


async def leave_namespace(namespace: str, root_veth: str) -> None:
    """Delete what `join_namespace` made, as much of it as there is. Deleting the
    namespace deletes the veth end in it, and with it the pair; the root end goes by
    name too in case the move into the namespace failed."""
    await run("ip", "netns", "del", namespace, check=False)
    await run("ip", "link", "del", root_veth, check=False)


async def _in(node: _Node, *argv: str) -> None:
    await run("ip", "netns", "exec", node.namespace, *argv)


async def run(*argv: str, check: bool = True) -> None:
    """Run a command; with `check`, `NetlabError` (its stderr) if it fails."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    _, stderr = await proc.communicate()
    if check and proc.returncode != 0:
        raise NetlabError(f"{' '.join(argv)}: exit {proc.returncode}: {stderr.decode().strip()}")
