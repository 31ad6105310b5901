"""infra/docker/Dockerfile, parsed as BuildKit parses it (the `dockerfile` package wraps
its parser): its stages on the same base-image argument, whose default is the public
Python image at a version the workspace supports and the one scripts/build_images.py
knows; the build context that script makes; a non-root user, the gRPC health check and
the service as entry point. tests/containers builds the images and runs them."""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from types import ModuleType

import dockerfile

from .infra_queries import ROOT

DOCKERFILE = ROOT / "infra" / "docker" / "Dockerfile"


def build_images() -> ModuleType:
    """scripts/build_images.py, imported."""
    spec = importlib.util.spec_from_file_location(
        "build_images", ROOT / "scripts" / "build_images.py"
    )
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("build_images", module)
    spec.loader.exec_module(module)
    return module


def commands() -> list[dockerfile.Command]:
    return list(dockerfile.parse_file(str(DOCKERFILE)))


def stages() -> dict[str, list[dockerfile.Command]]:
    """The commands of each stage (from its FROM on), by the stage's name."""
    out: dict[str, list[dockerfile.Command]] = {}
    for command in commands():
        if command.cmd == "FROM":
            name = command.value[-1]
            out[name] = []
        if out:
            out[name].append(command)
    return out


def arguments() -> dict[str, str]:
    """The global build arguments (before the first FROM) and their defaults."""
    out = {}
    for command in commands():
        if command.cmd == "FROM":
            break
        name, _, default = command.value[0].partition("=")
        out[name] = default
    return out


def test_the_stages_build_on_the_base_image_argument_the_public_python_image() -> None:
    default = arguments()["BASE_IMAGE"]
    match = re.fullmatch(r"python:3\.(\d+)-slim-\w+", default)
    assert match, default
    workspace = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    required = re.fullmatch(r">=3\.(\d+)", workspace["requires-python"])
    assert required
    assert int(match.group(1)) >= int(required.group(1))
    assert default == build_images().PUBLIC_BASE
    assert f"3.{match.group(1)}" == build_images().PYTHON
    built = stages()
    assert list(built) == ["packages", "app", "runtime", "service"]
    bases = {name: stage[0].value[0] for name, stage in built.items()}
    assert bases == {
        "packages": "${BASE_IMAGE}",
        "app": "packages",
        "runtime": "${BASE_IMAGE}",
        "service": "${RUNTIME}",
    }
    assert arguments()["RUNTIME"] == "runtime"  # one build of the last stage builds all


def test_the_packages_come_from_the_context_the_script_makes() -> None:
    built = stages()
    copies = [c for stage in ("packages", "app") for c in built[stage] if c.cmd == "COPY"]
    assert [c.value[0] for c in copies] == ["packages", "app"]
    source = (ROOT / "scripts" / "build_images.py").read_text()
    for copy in copies:
        assert f'context / "{copy.value[0]}"' in source
    assert all(c.flags == () for c in copies)
    runtime = built["runtime"]
    assert [c.flags for c in runtime if c.cmd == "COPY"] == [("--from=packages",), ("--from=app",)]


def test_the_runtime_runs_the_service_unprivileged_with_a_grpc_health_check() -> None:
    runtime = stages()["runtime"]
    by_name = {c.cmd: c for c in runtime}
    user = by_name["USER"].value[0].split(":")[0]
    assert user not in ("0", "root")
    health = " ".join(by_name["HEALTHCHECK"].value)
    assert "python -m tamto_common.health" in health
    assert 'python -m "tamto_$TAMTO_SERVICE"' in " ".join(by_name["ENTRYPOINT"].value)
    env = by_name["ENV"].value
    settings = dict(zip(env[::2], env[1::2], strict=True))
    assert settings["TAMTO_HOST"] == "0.0.0.0"
    assert settings["PATH"].startswith("/opt/tamto/bin:")
    service = {c.cmd: c for c in stages()["service"]}
    assert service["ENV"].value == ("TAMTO_SERVICE", "${SERVICE}")
    assert "import tamto_${SERVICE}" in service["RUN"].value[0]
