"""infra/docker/Dockerfile, parsed as BuildKit parses it (the `dockerfile` package wraps
its parser): two stages on the same base-image argument, whose default is the public
Python image at a version the workspace supports; the locked, non-editable install of
one service; a non-root user, the gRPC health check and the service as entry point.
The images are not built here (docs/testing.md says why)."""

from __future__ import annotations

import re
import tomllib

import dockerfile

from .infra_queries import ROOT

DOCKERFILE = ROOT / "infra" / "docker" / "Dockerfile"


def commands() -> list[dockerfile.Command]:
    return list(dockerfile.parse_file(str(DOCKERFILE)))


def stages() -> list[list[dockerfile.Command]]:
    """The commands of each stage (from its FROM on)."""
    out: list[list[dockerfile.Command]] = []
    for command in commands():
        if command.cmd == "FROM":
            out.append([])
        if out:
            out[-1].append(command)
    return out


def test_both_stages_build_on_the_base_image_argument_the_public_python_image() -> None:
    first = commands()[0]
    assert first.cmd == "ARG"
    name, _, default = first.value[0].partition("=")
    assert name == "BASE_IMAGE"
    match = re.fullmatch(r"python:3\.(\d+)-slim-\w+", default)
    assert match, default
    workspace = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    required = re.fullmatch(r">=3\.(\d+)", workspace["requires-python"])
    assert required
    assert int(match.group(1)) >= int(required.group(1))
    built = stages()
    assert len(built) == 2
    assert all(stage[0].value[0] == "${BASE_IMAGE}" for stage in built)


def test_the_build_stage_installs_one_service_from_the_lock() -> None:
    build, _ = stages()
    [sync] = [c for c in build if c.cmd == "RUN" and "uv sync" in c.value[0]]
    for flag in ("--frozen", "--no-dev", "--no-editable", '--package "tamto-${SERVICE}"'):
        assert flag in sync.value[0]
    ignored = (ROOT / ".dockerignore").read_text().split()
    for copy in (c for c in build if c.cmd == "COPY"):
        for source in copy.value[:-1]:
            assert (ROOT / source).exists(), source
            assert source not in ignored, source


def test_the_final_stage_runs_the_service_unprivileged_with_a_grpc_health_check() -> None:
    _, final = stages()
    by_name = {c.cmd: c for c in final}
    user = by_name["USER"].value[0].split(":")[0]
    assert user not in ("0", "root")
    assert by_name["COPY"].flags == ("--from=build",)
    health = " ".join(by_name["HEALTHCHECK"].value)
    assert "python -m tamto_common.health" in health
    assert 'python -m "tamto_$TAMTO_SERVICE"' in " ".join(by_name["ENTRYPOINT"].value)
    env = by_name["ENV"].value
    settings = dict(zip(env[::2], env[1::2], strict=True))
    assert settings["TAMTO_SERVICE"] == "${SERVICE}"
    assert settings["TAMTO_HOST"] == "0.0.0.0"
