"""The SDK as a user installs it: its wheel alone, in a clean virtual environment.

Every package of the workspace builds a wheel; the SDK's, with the protocol
wheel it needs and nothing else of Tamto's, installs into a new virtual
environment and publishes and consumes against a running system. What the
workspace's own venv happens to have cannot leak in: the program runs with the
new environment's interpreter.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tamto_testing.cluster import TestCluster

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
import asyncio, sys
import tamto_sdk
from tamto_sdk import Start

async def main(url: str, key: str) -> None:
    async with tamto_sdk.connect(url, api_key=key) as client:
        await client.streams.ensure("wheel-test", partitions=1)
        async with client.producer("wheel-test") as producer:
            for i in range(3):
                await producer.send_and_wait(f"from-the-wheel-{i}".encode())
        async with client.consumer("wheel-test", "wheel-reader", start=Start.earliest()) as consumer:
            got = []
            async for message in consumer:
                got.append(message.payload.decode())
                consumer.ack(message)
                if len(got) == 3:
                    break
        print(",".join(got))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def uv() -> str:
    """The uv that `./dev` uses: `$UV` under `uv run`, else on PATH, else `.uv/bin/uv`."""
    found = os.environ.get("UV") or shutil.which("uv") or str(ROOT / ".uv" / "bin" / "uv")
    if not Path(found).exists():
        pytest.fail(f"uv not found (looked at $UV, PATH and {ROOT / '.uv/bin/uv'})")
    return found


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done


def workspace_packages() -> set[str]:
    names = set()
    for pyproject in [*ROOT.glob("libs/*/pyproject.toml"), *ROOT.glob("services/*/pyproject.toml")]:
        names.add(tomllib.loads(pyproject.read_text())["project"]["name"].replace("-", "_"))
    return names


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every workspace package built as a wheel, by distribution name."""
    out = tmp_path_factory.mktemp("dist")
    run(uv(), "build", "--all-packages", "--wheel", "--quiet", "-o", str(out))
    return {path.name.split("-")[0]: path for path in out.glob("*.whl")}


def test_every_package_builds_a_wheel(wheels: dict[str, Path]) -> None:
    assert set(wheels) == workspace_packages()


def test_the_sdk_wheel_alone_publishes_and_consumes(
    wheels: dict[str, Path], tamto_cluster: TestCluster, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    run(uv(), "venv", "--quiet", "--python", sys.executable, str(venv))
    python = venv / "bin" / "python"
    sdk = [str(wheels["tamto_sdk"]), str(wheels["tamto_protocol"])]
    # From uv's cache when it holds every dependency (CI after `./dev`), else the index.
    offline = subprocess.run(
        [uv(), "pip", "install", "--quiet", "--offline", "--python", str(python), *sdk],
        capture_output=True,
        text=True,
        check=False,
    )
    if offline.returncode != 0:
        run(uv(), "pip", "install", "--quiet", "--python", str(python), *sdk)

    frozen = run(uv(), "pip", "freeze", "--python", str(python)).stdout
    installed = {line.split("==")[0].split(" @ ")[0].replace("-", "_") for line in frozen.split()}
    assert installed & workspace_packages() == {"tamto_sdk", "tamto_protocol"}, frozen

    where = run(str(python), "-c", "import tamto_sdk; print(tamto_sdk.__file__)", cwd=tmp_path)
    assert str(venv) in where.stdout, "the SDK imported is the wheel's, not the workspace's"

    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    done = run(str(python), str(script), tamto_cluster.url, tamto_cluster.credential, cwd=tmp_path)
    assert done.stdout.strip() == ",".join(f"from-the-wheel-{i}" for i in range(3))
