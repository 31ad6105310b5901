"""Every service process runs gRPC's polling I/O (`tamto_common.grpc_io`): its
`__main__` chooses it before anything imports grpc, which is the only time the
choice takes effect. Importing the entry module in a fresh interpreter shows it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tamto_common.grpc_io import POLLING_IO_EXPERIMENTS

SERVICES = ("auth", "gateway", "router", "storage")


@pytest.mark.parametrize("service", SERVICES)
def test_service_entry_point_chooses_polling_io(service: str) -> None:
    probe = (
        f"import tamto_{service}.__main__, os, sys; "
        "print('grpc' in sys.modules, os.environ.get('GRPC_EXPERIMENTS'))"
    )
    environ = {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"}
    completed = subprocess.run(
        [sys.executable, "-c", probe],
        env=environ,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    # grpc was imported (by the service's modules), after the choice was made.
    assert completed.stdout.strip() == f"True {POLLING_IO_EXPERIMENTS}"
