"""The service images, built once per test run by scripts/build_images.py on the local
Debian base (mmdebstrap): no registry of images is reachable here. The base's tarball
and podman's layers are kept between runs (scripts/build_images.py, `cache_dir`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tamto_testing.needs import missing

from .podman import unavailable

ROOT = Path(__file__).resolve().parents[2]

#: A cold build (mmdebstrap, then five images) on a loaded 2-core machine.
BUILD_TIMEOUT_S = 1200


@pytest.fixture(scope="session")
def service_images() -> dict[str, str]:
    """Each service's image tag (built unless podman's layer cache has it)."""
    missing(unavailable())
    built = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_images.py"), "--base", "debian", "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=BUILD_TIMEOUT_S,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    report = json.loads(built.stdout)
    sys.stderr.write(f"images built: {json.dumps(report)}\n")
    return {service: image["image"] for service, image in report["images"].items()}
