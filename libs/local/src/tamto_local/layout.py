"""The processes of a local Tamto system and how each is set up, before any starts.

Both the launcher (`tamto_local.cluster.LocalCluster`, `tamto up`) and the test
cluster (`tamto_testing.cluster`) run the same processes the same way: this module
names them (`node_processes`: `storage`, `storage-2`, ..., `gateway`, `gateway-2`),
says where each keeps its state (`process_data_dir`), makes the data directory's
credentials on first use (the development API key, the cluster secret), and builds
the environment and command line that configure each service (`service_env`,
`service_argv`). Starting and supervising the processes is `tamto_local.cluster`'s.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tamto_common.apikeys import new_api_key
from tamto_common.cluster_credential import new_cluster_secret
from tamto_common.dev_credential import (
    DEV_CREDENTIAL_FILE,
    CredentialFileError,
    load_dev_credential,
)
from tamto_common.durable import DamagedFile, make_dirs, read_whole, write_atomic
from tamto_common.tls import TlsMaterial
from tamto_local.tls import cert_paths

SERVICES = ("auth", "storage", "router", "gateway")
#: Every service, in start order: `SERVICES` and the processing nodes, which `tamto up`
#: runs and test clusters start only when a test asks (`node_processes`).
ALL_SERVICES = (*SERVICES, "processing")
#: Services that run once per node with several nodes; gateways run twice (`GATEWAYS`).
PER_NODE = ("storage", "router", "processing")
GATEWAYS = 2


class LaunchError(Exception):
    """The cluster could not start; the message is one line for the user."""


def dev_credential(data_dir: Path) -> str:
    """The development API key of this data directory, created on first use (mode 0600,
    written atomically so a crash never leaves an empty file)."""
    try:
        existing = load_dev_credential(data_dir)
    except CredentialFileError as exc:
        raise LaunchError(str(exc)) from None
    if existing is not None:
        return existing
    make_dirs(data_dir)
    key = str(new_api_key())
    write_atomic(data_dir / DEV_CREDENTIAL_FILE, f"{key}\n".encode(), mode=0o600)
    return key


#: Where a local system keeps its cluster secret (`tamto_common.cluster_credential`).
CLUSTER_SECRET_FILE = "cluster-secret"


def cluster_secret(data_dir: Path) -> str:
    """The cluster secret of this data directory, created on first use (mode 0600): every
    service of the system is given it, and the first records its hash in etcd."""
    path = data_dir / CLUSTER_SECRET_FILE
    try:
        return read_whole(path, "the cluster secret").decode().strip()
    except FileNotFoundError:
        pass
    except DamagedFile as exc:
        raise LaunchError(
            f"{exc}: restore it (the cluster's etcd holds its hash), or delete {data_dir} "
            "to start a new system"
        ) from None
    make_dirs(data_dir)
    secret = new_cluster_secret()
    write_atomic(path, f"{secret}\n".encode(), mode=0o600)
    return secret


def launcher_tls(tls_dir: Path | None) -> TlsMaterial | None:
    """The launcher's own client certificate (for health checks over mTLS), if TLS is on."""
    if tls_dir is None:
        return None
    paths = cert_paths(tls_dir, "launcher")
    return TlsMaterial.load(paths.cert, paths.key, paths.ca, require_client_cert=True)


@dataclass(frozen=True)
class ServiceEnv:
    """What every service process of one system is told through its environment."""

    etcd_endpoint: str
    nats_url: str
    data_dir: Path
    credential: str
    lease_ttl_s: int = 5
    log_level: str = "info"
    host: str = "127.0.0.1"
    #: The development PKI (see `tamto_local.tls`); None: plaintext.
    tls_dir: Path | None = None
    #: The cluster credential every service joins with (`cluster_secret`); empty: none.
    cluster_secret: str = ""


def split_process(process: str) -> tuple[str, int]:
    """(service, node index) of a process name: `storage` -> ("storage", 1),
    `router-3` -> ("router", 3)."""
    service, _, index = process.partition("-")
    return service, int(index) if index else 1


def node_processes(nodes: int, processing: bool = False) -> list[str]:
    """The service processes of a system of `nodes` nodes, in start order: with one node
    `SERVICES`; with more, auth, `storage` .. `storage-N`, `router` .. `router-N`,
    `gateway` and `gateway-2`, and with `processing` a processing node per node
    (`tamto up` runs them; test clusters start one when a test asks)."""
    names: list[str] = []
    for service in ALL_SERVICES:
        if service == "processing" and not processing:
            continue
        count = 1
        if nodes > 1 and service in PER_NODE:
            count = nodes
        elif nodes > 1 and service == "gateway":
            count = GATEWAYS
        names += [service if i == 1 else f"{service}-{i}" for i in range(1, count + 1)]
    return names


def process_data_dir(data_dir: Path, process: str, nodes: int) -> Path:
    """Where process `process` keeps its state: `<data_dir>/<service>` with one node,
    `<data_dir>/node-<i>/<service>` with several."""
    service, index = split_process(process)
    return data_dir / service if nodes == 1 else data_dir / f"node-{index}" / service


def service_env(
    name: str,
    shared: ServiceEnv,
    port: int,
    extra: Mapping[str, str] | None = None,
    *,
    process: str | None = None,
    nodes: int = 1,
    http_port: int = 0,
    mqtt_port: int = 0,
) -> dict[str, str]:
    """The environment that configures service `name` (see each service's config);
    `process` names one of several of it (`storage-2`, see `node_processes`); a
    gateway serves its HTTP API on `http_port` and MQTT on `mqtt_port` (0: none)."""
    process = process or name
    data_dir = process_data_dir(shared.data_dir, process, nodes)
    index = split_process(process)[1]
    env = {
        **os.environ,
        "TAMTO_ETCD_ENDPOINTS": shared.etcd_endpoint,
        "TAMTO_NATS_URL": shared.nats_url,
        "TAMTO_LEASE_TTL_S": str(shared.lease_ttl_s),
        "TAMTO_LOG_LEVEL": shared.log_level,
        "TAMTO_HOST": shared.host,
        f"TAMTO_{name.upper()}_PORT": str(port),
        f"TAMTO_{name.upper()}_INSTANCE_ID": f"{name}-{index}",
        "TAMTO_DATA_DIR": str(data_dir),
        "PYTHONUNBUFFERED": "1",
        **({"TAMTO_CLUSTER_SECRET": shared.cluster_secret} if shared.cluster_secret else {}),
        **(extra or {}),
    }
    if name == "auth":
        env["TAMTO_AUTH_DEV_API_KEY"] = shared.credential
    if name in ("auth", "gateway"):
        env[f"TAMTO_{name.upper()}_AUDIT_FILE"] = str(data_dir / "audit.jsonl")
    if name == "gateway" and http_port:
        env["TAMTO_GATEWAY_HTTP_PORT"] = str(http_port)
    if name == "gateway" and mqtt_port:
        env["TAMTO_GATEWAY_MQTT_PORT"] = str(mqtt_port)
    if shared.tls_dir is not None:
        paths = cert_paths(shared.tls_dir, name)
        env[f"TAMTO_{name.upper()}_TLS_CERT_FILE"] = str(paths.cert)
        env[f"TAMTO_{name.upper()}_TLS_KEY_FILE"] = str(paths.key)
        env[f"TAMTO_{name.upper()}_TLS_CA_FILE"] = str(paths.ca)
    return env


def service_argv(name: str) -> list[str]:
    return [sys.executable, "-m", f"tamto_{name}"]
