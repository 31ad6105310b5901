"""`use_polling_io` sets gRPC's experiments only where it still can, and never over
an operator's choice (`tamto_common.grpc_io`). Each case runs in a fresh
interpreter: the choice is about what happens before grpc is imported."""

from __future__ import annotations

import os
import subprocess
import sys

from tamto_common.grpc_io import POLLING_IO_EXPERIMENTS

PROBE = """
import os, sys
{before}
from tamto_common.grpc_io import use_polling_io
print(use_polling_io(), os.environ.get("GRPC_EXPERIMENTS"), sep="|")
"""


def _probe(before: str = "", **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"}
    completed = subprocess.run(
        [sys.executable, "-c", PROBE.format(before=before)],
        env={**environ, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return completed.stdout.strip()


def test_sets_the_experiments_before_grpc_is_imported() -> None:
    assert _probe() == f"True|{POLLING_IO_EXPERIMENTS}"


def test_keeps_the_operators_setting() -> None:
    assert _probe(GRPC_EXPERIMENTS="") == "False|"
    assert _probe(GRPC_EXPERIMENTS="event_engine_client") == "False|event_engine_client"


def test_changes_nothing_once_grpc_is_imported() -> None:
    assert _probe(before="import grpc") == "False|None"
