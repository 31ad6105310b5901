"""A small Tamto cluster of containers on a podman network, driven by the podman CLI.

Why the CLI and not testcontainers' Docker API: the test needs what that API does not
carry on podman, a network whose containers have addresses fixed before they start
(each service advertises its own to the others, and podman's DNS plugin is not
installed here), the images' own health check (`podman healthcheck run`), and a kill
-9 of a container's process behind podman's back, so that its restart policy acts.
etcd and nats-server run from the one-binary images `tamto_testing.containers` makes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from ipaddress import IPv4Network

from tamto_testing.containers import image_entrypoint, image_layer, image_tag

#: The gRPC port of every service image (infra/docker/Dockerfile's TAMTO_PORT).
SERVICE_PORT = 7400


def podman(*args: str, stdin: bytes | None = None, check: bool = True) -> str:
    """Run `podman args`; its standard output (CalledProcessError, with its error
    output, if it fails and `check`)."""
    done = subprocess.run(
        ["podman", *args], input=stdin, capture_output=True, check=False, timeout=120
    )
    if check and done.returncode != 0:
        raise subprocess.CalledProcessError(
            done.returncode, done.args, done.stdout, done.stderr.decode(errors="replace")
        )
    return done.stdout.decode()


def unavailable() -> str | None:
    """Why the container cluster cannot run here, or None."""
    for tool in ("podman", "mmdebstrap"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (.ci/run installs it from Debian)"
    if os.geteuid() != 0:
        return "the container cluster runs rootful podman (root)"
    return None


def binary_image(name: str) -> str:
    """The local image running the `name` binary (etcd, nats-server), imported once."""
    tag = image_tag(name)
    if subprocess.run(["podman", "image", "exists", tag], check=False).returncode != 0:
        podman("import", "--change", image_entrypoint(name), "-", tag, stdin=image_layer(name))
    return tag


@dataclass
class ContainerCluster:
    """Containers named `<prefix>-<name>` on the network `<prefix>`, at fixed addresses."""

    prefix: str
    subnet: IPv4Network
    addresses: dict[str, str] = field(default_factory=dict)

    def address(self, name: str) -> str:
        """The container's address on the network, chosen on first use."""
        if name not in self.addresses:
            self.addresses[name] = str(self.subnet[10 + len(self.addresses)])
        return self.addresses[name]

    def run(
        self,
        name: str,
        image: str,
        *,
        env: Mapping[str, str] | None = None,
        args: tuple[str, ...] = (),
        options: tuple[str, ...] = (),
    ) -> None:
        """Start container `name` from `image` (`options` before the image, `args` after)."""
        settings = [f"--env={key}={value}" for key, value in (env or {}).items()]
        podman(
            "run",
            "--detach",
            f"--name={self.prefix}-{name}",
            f"--network={self.prefix}",
            f"--ip={self.address(name)}",
            *settings,
            *options,
            image,
            *args,
        )

    def inspect(self, name: str) -> dict[str, object]:
        [found] = json.loads(podman("container", "inspect", f"{self.prefix}-{name}"))
        assert isinstance(found, dict)
        return found

    def state(self, name: str) -> dict[str, object]:
        state = self.inspect(name)["State"]
        assert isinstance(state, dict)
        return state

    def exec(self, name: str, *command: str) -> str:
        """`command`'s output, run in the container as its image's user."""
        return podman("exec", f"{self.prefix}-{name}", *command)

    def healthy(self, name: str) -> bool:
        """Whether the image's health check passes now (run once, here)."""
        done = subprocess.run(
            ["podman", "healthcheck", "run", f"{self.prefix}-{name}"],
            capture_output=True,
            check=False,
            timeout=60,
        )
        return done.returncode == 0

    def crash(self, name: str) -> None:
        """kill -9 of the container's process from outside podman, as a crash would."""
        pid = self.state(name)["Pid"]
        assert isinstance(pid, int), pid
        assert pid > 0, f"{name} is not running"
        os.kill(pid, signal.SIGKILL)

    def published(self, name: str, port: int) -> tuple[str, int]:
        """The host address of the container's published `port`."""
        host, _, mapped = (
            podman("port", f"{self.prefix}-{name}", f"{port}/tcp").strip().rpartition(":")
        )
        return host, int(mapped)

    def logs(self, name: str) -> str:
        done = subprocess.run(
            ["podman", "logs", "--tail=40", f"{self.prefix}-{name}"],
            capture_output=True,
            check=False,
        )
        return (done.stdout + done.stderr).decode(errors="replace")

    def remove(self) -> None:
        for name in self.addresses:
            podman("rm", "--force", "--time=0", f"{self.prefix}-{name}", check=False)
        podman("network", "rm", "--force", self.prefix, check=False)


@contextmanager
def container_cluster() -> Iterator[ContainerCluster]:
    """A podman network of its own (podman picks a free subnet) and the containers on
    it, every one removed at the end."""
    prefix = f"tamto-test-{uuid.uuid4().hex[:8]}"
    podman("network", "create", prefix)
    [network] = json.loads(podman("network", "inspect", prefix))
    cluster = ContainerCluster(prefix, IPv4Network(network["subnets"][0]["subnet"]))
    try:
        yield cluster
    finally:
        cluster.remove()
