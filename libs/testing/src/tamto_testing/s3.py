"""A real S3 server for tests: SeaweedFS (`tamto_local.s3`) as a process on free loopback
ports, its data under the test's directory, the bucket created before it is handed out."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tamto_local.s3 import STOP_GRACE_S, S3Spec, create_bucket, weed_argv
from tamto_testing.processes import TestProcess, tcp_open


@contextmanager
def s3_server(workdir: Path, spec: S3Spec | None = None) -> Iterator[S3Spec]:
    """SeaweedFS with its S3 gateway, running until the block ends; yields where it is.

    `spec`: the data directory and ports of a server run before (to start it again).
    """
    spec = spec or S3Spec(data_dir=workdir / "seaweedfs")
    proc = TestProcess("seaweedfs", weed_argv(spec), workdir / "logs" / "seaweedfs.log").start()
    try:
        proc.wait_ready(lambda: tcp_open(spec.host, spec.ports["s3.port"]) and create_bucket(spec))
        yield spec
    finally:
        proc.stop(timeout_s=STOP_GRACE_S)
