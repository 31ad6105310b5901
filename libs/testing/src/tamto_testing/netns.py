"""Network partitions for tests: a process in a network namespace of the test's own.

The partition tests need a node that the rest of the cluster can lose
touch with while it keeps running (a kill -9 is not a partition: the process
stops). `Netns` creates a network namespace joined to the root namespace by a
veth pair, with a /30 from 10.231.0.0/16 that no interface uses yet: the root
end is `root_address`, the namespace's end `address`. A service started with
`argv_prefix` runs inside it and binds `address`; everything it talks to in the
root namespace must listen on `root_address` (127.0.0.1 there is not reachable
from the namespace).

`cut()` drops the namespace's traffic over its veth (iptables inside the
namespace: every packet, or only TCP to some root ports); `delay()` adds latency
to it, with tc netem where the kernel has it, else (this machine: no sch_netem)
by sending the namespace's TCP over the veth through a delaying proxy that runs
inside the namespace (`tamto_testing.delay_proxy`; TCP only, see `delay`);
`heal()` removes cuts and delays. Only the namespace and the veth the test made
are touched: their names are random per run, and leaving the block (also on
failure) stops the proxy and deletes both, which deletes the rules and qdiscs
with them.

Root and the `ip`/`iptables` tools are needed; `unavailable()` says why not, for
a skip with a reason.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterable

from tamto_local.delay_proxy_control import ProxyControl
from tamto_local.netlab import MadeForBlock, NetlabError, join_namespace, leave_namespace, run
from tamto_testing.delay_proxy import MARK

#: Where the /30s of test namespaces come from (private, unused by the tests otherwise).
SUBNET = ipaddress.ip_network("10.231.0.0/16")
#: Attempts at picking a free /30 before giving up (collisions are rare: 16,384 of them).
PICK_ATTEMPTS = 20


#: A namespace command failed (the message has the command and its stderr), or no
#: subnet was free: the launcher's network lab runs the same commands.
NetnsError = NetlabError


def unavailable() -> str | None:
    """Why this machine cannot run partition tests (None: it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (euid is not 0)"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"network partition tests need the `{tool}` tool on PATH"
    return None


@functools.cache
def netem_unavailable() -> str | None:
    """Why `delay()` cannot work here (None: it can): the kernel must have sch_netem."""
    if shutil.which("tc") is None:
        return "link delays need the `tc` tool on PATH"
    probe = subprocess.run(
        ["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return f"this kernel has no tc netem ({probe.stderr.strip()})"
    subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"], capture_output=True, check=False)
    return None


def _used_addresses() -> set[ipaddress.IPv4Address]:
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    used: set[ipaddress.IPv4Address] = set()
    for line in out.splitlines():
        parts = line.split()
        if "inet" in parts:
            used.add(ipaddress.IPv4Interface(parts[parts.index("inet") + 1]).ip)
    return used


def _pick_subnet() -> ipaddress.IPv4Network:
    used = _used_addresses()
    subnets = 2 ** (30 - SUBNET.prefixlen)
    for _ in range(PICK_ATTEMPTS):
        index = secrets.randbelow(subnets)
        net = ipaddress.IPv4Network((int(SUBNET.network_address) + 4 * index, 30))
        if not set(net) & used:
            return net
    raise NetnsError(f"no free /30 in {SUBNET} after {PICK_ATTEMPTS} attempts")


class Netns(MadeForBlock):
    """One namespace and its veth pair, for an `async with` block.

    `cut`, `heal` and `delay` may be called any number of times inside the block.
    """

    def __init__(self) -> None:
        token = secrets.token_hex(4)
        self.name = f"tamto-{token}"
        self.root_veth = f"tv{token}r"  # interface names: 15 characters at most
        self.inner_veth = f"tv{token}n"
        net = _pick_subnet()
        self.root_address = str(net.network_address + 1)
        self.address = str(net.network_address + 2)
        self._proxy: ProxyControl | None = None
        self._redirecting = False  # the nat rules that send TCP to the proxy are in place

    @property
    def argv_prefix(self) -> list[str]:
        """Prepend to a command to run it inside the namespace."""
        return ["ip", "netns", "exec", self.name]

    @property
    def proxy_pid(self) -> int | None:
        """The delay proxy's process id while it runs (`delay`), else None."""
        return self._proxy.pid if self._proxy is not None else None

    async def _create(self) -> None:
        await join_namespace(
            self.name,
            (self.root_veth, self.inner_veth),
            f"{self.address}/30",
            ("addr", "add", f"{self.root_address}/30", "dev", self.root_veth),
        )

    async def cut(self, root_ports: Iterable[int] | None = None) -> None:
        """Drop the namespace's traffic over its veth, both ways: all of it, or only
        TCP connections to `root_ports` (services listening on `root_address`)."""
        ports = list(root_ports) if root_ports is not None else None
        if ports is None:
            await self._in("iptables", "-I", "OUTPUT", "-o", self.inner_veth, "-j", "DROP")
            await self._in("iptables", "-I", "INPUT", "-i", self.inner_veth, "-j", "DROP")
            return
        for port in ports:
            match = ["-p", "tcp"]
            await self._in(
                "iptables", "-I", "OUTPUT", "-o", self.inner_veth, *match,
                "--dport", str(port), "-j", "DROP",
            )  # fmt: skip
            await self._in(
                "iptables", "-I", "INPUT", "-i", self.inner_veth, *match,
                "--sport", str(port), "-j", "DROP",
            )  # fmt: skip

    async def heal(self) -> None:
        """Remove every cut (the namespace's own filter chains are emptied) and delay.

        The delay proxy, once started, stays in the path, forwarding at once: removing
        its nat rules would reset the connections through it (the kernel drops their
        address translation with the rules)."""
        await self._in("iptables", "-F", "INPUT")
        await self._in("iptables", "-F", "OUTPUT")
        for veth, inside in ((self.inner_veth, True), (self.root_veth, False)):
            argv = ("tc", "qdisc", "del", "dev", veth, "root")
            await (self._in(*argv, check=False) if inside else run(*argv, check=False))
        if self._proxy is not None:
            await self._proxy.set_delay(0)

    async def delay(self, ms: int, *, proxy: bool | None = None) -> None:
        """Delay the traffic over the veth by `ms` each way, so a round trip takes 2 x
        `ms` more; call again to change it, `heal()` to remove it.

        With tc netem on both ends where the kernel has it (`netem_unavailable()`),
        every packet. Else (or `proxy=True`) the namespace's TCP over the veth, both
        the connections it opens and those it accepts, goes through
        `tamto_testing.delay_proxy`, which forwards each chunk `ms` after it came (not
        UDP or ICMP; the handshake is not delayed). A connection only goes through the
        proxy from its start, so the first such delay resets the namespace's open TCP
        connections over the veth (`ss -K`): their ends see a reset and reconnect,
        through the proxy. It stays in the path until the block ends (`heal`)."""
        if ms < 0:
            raise ValueError(f"a delay is 0 ms or more, not {ms}")
        if proxy is None:
            proxy = netem_unavailable() is not None
        if not proxy:
            await self._in("tc", "qdisc", "replace", "dev", self.inner_veth, "root", "netem",
                           "delay", f"{ms}ms")  # fmt: skip
            await run("tc", "qdisc", "replace", "dev", self.root_veth, "root", "netem",
                       "delay", f"{ms}ms")  # fmt: skip
            return
        if self._proxy is None:
            self._proxy = await ProxyControl.start(self.argv_prefix)
        await self._proxy.set_delay(ms)
        if self._redirecting:
            return  # the proxy has been in the path since the first delay
        redirect = ["-j", "REDIRECT", "--to-ports", str(self._proxy.port)]
        not_proxy = ["-m", "mark", "!", "--mark", hex(MARK)]
        to_root = ["-p", "tcp", "-d", self.root_address]
        await self._in("iptables", "-t", "nat", "-A", "OUTPUT", *to_root, *not_proxy, *redirect)
        from_root = ["-i", self.inner_veth, "-p", "tcp"]
        await self._in("iptables", "-t", "nat", "-A", "PREROUTING", *from_root, *redirect)
        self._redirecting = True
        # Connections opened before the rules bypass the proxy: reset them (not the proxy's own).
        await self._in("ss", "-t", "-n", "-K", "dst", self.root_address,
                       "and", "fwmark", "!=", hex(MARK))  # fmt: skip

    async def _stop_proxy(self) -> None:
        proxy, self._proxy = self._proxy, None
        if proxy is not None:
            await proxy.stop()

    async def _in(self, *argv: str, check: bool = True) -> None:
        await run("ip", "netns", "exec", self.name, *argv, check=check)

    async def _delete(self) -> None:
        await self._stop_proxy()  # its process would keep the namespace alive
        await leave_namespace(self.name, self.root_veth)
