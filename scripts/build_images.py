"""Build each service's container image with podman, from this checkout's wheels.

Why a script and not a bare `podman build`: the image build itself needs no network.
This script prepares a build context per service on the host, which reaches the
package registries: the workspace packages the service needs, built as wheels from
this checkout, and those wheels installed with every third-party package `uv.lock`
pins for it (hash-checked, for the images' Python and platform) into `site/`.
`infra/docker/Dockerfile` then only copies that tree onto the base image.

The base image is the Dockerfile's `BASE_IMAGE` argument: by default the public
Python image; with `--base debian`, one built here with mmdebstrap from Debian's
packages (bookworm and its python3), for machines that reach no image registry. Its
tarball is kept in the cache directory (`TAMTO_IMAGE_CACHE`, by default
`~/.cache/tamto/images`), so it is built once per machine.

    python scripts/build_images.py                      # every service, public base
    python scripts/build_images.py --base debian --json # local base, sizes and times
    python scripts/build_images.py --services gateway --tag dev
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "infra" / "docker" / "Dockerfile"
SERVICES = ("gateway", "router", "storage", "auth", "processing")
#: The Dockerfile's default base (tests/repo/test_dockerfile.py checks they agree).
PUBLIC_BASE = "python:3.11-slim-bookworm"
#: The Python of both bases: the wheels in the context are chosen for it.
PYTHON = "3.11"
#: glibc of Debian bookworm, which both bases are: the newest manylinux wheels they run.
MANYLINUX = "manylinux_2_36"
SUITE = "bookworm"
#: The runtime image's label naming what it was built from (`runtime_key`).
RUNTIME_LABEL = "dev.tamto.runtime-key"
#: What uv records in an installed package's dist-info: the install's time among others.
UV_CACHE_FILE = "uv_cache.json"
#: What mmdebstrap puts in the local base: Debian's essential set, python3, CA
#: certificates and the C++ runtime (grpcio, pyarrow and others link it), without
#: documentation, manual pages or translations.
MMDEBSTRAP_OPTIONS = (
    "--variant=essential",
    "--include=python3,ca-certificates,libstdc++6",
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
)
#: This machine's Debian sources, given to mmdebstrap when present (else its default).
APT_SOURCES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))
BASE_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def cache_dir() -> Path:
    """Where the local base's tarball and the build contexts are kept between runs."""
    configured = os.environ.get("TAMTO_IMAGE_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "tamto" / "images"


def workspace_version() -> str:
    """The workspace's one version (scripts/version.py), the images' default tag."""
    version: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    return version


def uv() -> str:
    """The uv that runs this script (`uv run` sets UV), else one on PATH or ./dev's."""
    found = os.environ.get("UV") or shutil.which("uv")
    return found or str(ROOT / ".uv" / "bin" / "uv")


def run(argv: Sequence[str], **kwargs: object) -> str:
    """Run `argv`, return its standard output; its standard error goes to ours."""
    done = subprocess.run(list(argv), check=True, stdout=subprocess.PIPE, text=True, **kwargs)  # type: ignore[call-overload]
    out: str = done.stdout
    return out


def image_exists(engine: str, tag: str) -> bool:
    return subprocess.run([engine, "image", "exists", tag], check=False).returncode == 0


def debian_base(engine: str, cache: Path) -> str:
    """The tag of the local Debian base, imported from its cached tarball, which
    mmdebstrap builds when missing (named by a hash of how it is built)."""
    sources = next((str(p) for p in APT_SOURCES if p.exists()), None)
    argv = ["mmdebstrap", "--format=tar", *MMDEBSTRAP_OPTIONS, SUITE]
    key = hashlib.sha256(json.dumps(argv).encode()).hexdigest()[:12]
    tag = f"localhost/tamto-base:{SUITE}-{key}"
    if image_exists(engine, tag):
        return tag
    tarball = cache / f"base-{SUITE}-{key}.tar"
    if not tarball.exists():
        partial = tarball.with_suffix(".partial")
        cache.mkdir(parents=True, exist_ok=True)
        mirror = [sources] if sources else []
        subprocess.run([*argv, str(partial), *mirror], check=True, stdin=subprocess.DEVNULL)
        partial.rename(tarball)
    run([engine, "import", "--change", f"ENV {BASE_PATH}", str(tarball), tag])
    return tag


def requirements(services: Sequence[str]) -> tuple[list[str], list[Path]]:
    """What `uv.lock` pins for `services` (no development packages): the third-party
    requirement lines, with hashes, and the workspace packages' directories."""
    packages = [arg for service in services for arg in ("--package", f"tamto-{service}")]
    exported = run(
        [uv(), "export", "--frozen", "--no-dev", "--no-editable", "--no-header", *packages],
        cwd=ROOT,
    )
    lines: list[str] = []
    members: list[Path] = []
    for line in exported.splitlines():
        if line.startswith("./"):
            members.append(ROOT / line.strip())
        elif line.strip() and not line.startswith("#"):
            lines.append(line)
    return lines, members


def build_wheel(member: Path, wheels: Path) -> Path:
    """The wheel of workspace package `member`, built from this checkout."""
    name = tomllib.loads((member / "pyproject.toml").read_text())["project"]["name"]
    run([uv(), "build", "--wheel", "--quiet", "--out-dir", str(wheels), str(member)], cwd=ROOT)
    [wheel] = wheels.glob(f"{name.replace('-', '_')}-*.whl")
    return wheel


def install(target: Path, requirements: Sequence[str]) -> None:
    """`requirements` (arguments of `uv pip install`) installed into `target` for the
    images' Python and platform, every file's time set to one instant, so that podman
    finds an unchanged tree in its layer cache."""
    wanted = ["--python-version", PYTHON, "--python-platform", f"{platform.machine()}-{MANYLINUX}"]
    install_argv = [uv(), "pip", "install", "--quiet", "--no-deps", "--target", str(target)]
    run([*install_argv, *wanted, *requirements], cwd=ROOT)
    for path in (target, *target.rglob("*")):
        os.utime(path, (0, 0), follow_symlinks=False)


def build_context(services: Sequence[str], context: Path) -> Path:
    """`context` made the images' build context: `packages/`, every third-party package
    the services need (the large layer all their images share), and `app/`, Tamto's own
    packages, installed from wheels built from this checkout.

    `packages/` is kept while the pins are the same: podman's layer cache takes a
    rewritten file for a changed one, so the large layer is built again only when
    uv.lock changes."""
    context.mkdir(parents=True, exist_ok=True)
    pinned, members = requirements(services)
    text = "\n".join(pinned) + "\n"
    key = hashlib.sha256(f"{PYTHON} {platform.machine()} {MANYLINUX}\n{text}".encode()).hexdigest()
    stamp = context / "packages.sha256"
    if not stamp.exists() or stamp.read_text() != key:
        stamp.unlink(missing_ok=True)
        shutil.rmtree(context / "packages", ignore_errors=True)
        requirements_file = context.parent / "requirements.txt"
        requirements_file.write_text(text)
        install(context / "packages", ["-r", str(requirements_file)])
        stamp.write_text(key)
    shutil.rmtree(context / "app", ignore_errors=True)
    wheels = context.parent / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    install(context / "app", [str(build_wheel(member, wheels)) for member in members])
    return context


def tree_digest(root: Path) -> str:
    """A digest of every path under `root`, with each file's bytes and each link's target.

    Leaves out what uv writes anew at each install (`UV_CACHE_FILE`, the time of the
    install, and its line in the package's RECORD)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        name = path.relative_to(root).as_posix()
        if path.is_symlink():
            digest.update(f"link {name} {os.readlink(path)}\n".encode())
        elif path.name == UV_CACHE_FILE:
            continue
        elif path.is_file():
            digest.update(f"file {name}\n".encode())
            data = path.read_bytes()
            if path.name == "RECORD":
                kept = [x for x in data.splitlines() if UV_CACHE_FILE.encode() not in x]
                data = b"\n".join(kept)
            digest.update(data)
        else:
            digest.update(f"dir {name}\n".encode())
    return digest.hexdigest()


def image_label(engine: str, tag: str, label: str) -> str | None:
    """The value of `label` on image `tag` (None when the image or the label is missing)."""
    done = subprocess.run(
        [engine, "image", "inspect", tag], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return None
    [found] = json.loads(done.stdout)
    labels = (found.get("Config") or {}).get("Labels") or found.get("Labels") or {}
    value = labels.get(label)
    return value if isinstance(value, str) else None


def runtime_key(engine: str, context: Path, base_image: str, args: Sequence[str]) -> str:
    """What the runtime image is built from: the Dockerfile, the base image's id, the build
    arguments, the third-party packages' pins and Tamto's own tree in the context."""
    base_id = run([engine, "image", "inspect", "--format", "{{.Id}}", base_image]).strip()
    digest = hashlib.sha256(DOCKERFILE.read_bytes())
    digest.update(json.dumps([base_id, *args]).encode())
    digest.update((context / "packages.sha256").read_bytes())
    digest.update(tree_digest(context / "app").encode())
    return digest.hexdigest()


def build(engine: str, context: Path, tag: str, *args: str) -> None:
    """`podman build` of the Dockerfile in `context` into image `tag`; the docker format,
    as the OCI image format has no HEALTHCHECK."""
    command = [engine, "build", "--quiet", "--format=docker", "-f", str(DOCKERFILE), *args]
    run([*command, "-t", tag, str(context)])


def image_size(engine: str, tag: str) -> int:
    """The image's size in bytes, as the engine reports it."""
    return int(run([engine, "image", "inspect", "--format", "{{.Size}}", tag]).strip())


def build_all(
    services: Sequence[str], base: str, tag: str, engine: str, cache: Path
) -> dict[str, object]:
    """Build every image of `services`; what was built, its sizes and the times taken."""
    started = time.monotonic()
    base_image = debian_base(engine, cache) if base == "debian" else base
    base_s = time.monotonic() - started
    context = build_context(services, cache / "context")
    context_s = time.monotonic() - started - base_s
    # The stages every image shares, once, as an image; then each service's from it,
    # with nothing to copy (an empty context).
    runtime = f"localhost/tamto-runtime:{tag}"
    args = ["--build-arg", f"PYTHON_VERSION={PYTHON}", "--target"]
    if base_image != PUBLIC_BASE:
        args = ["--build-arg", f"BASE_IMAGE={base_image}", *args]
    # Even with every layer cached, podman takes tens of seconds to find that out (it
    # hashes the large packages tree it would copy): an image labelled with what it was
    # built from is kept as it is.
    key = runtime_key(engine, context, base_image, args) if image_exists(engine, base_image) else ""
    if not key or image_label(engine, runtime, RUNTIME_LABEL) != key:
        build(engine, context, runtime, "--label", f"{RUNTIME_LABEL}={key}", *args, "runtime")
    runtime_s = time.monotonic() - started - base_s - context_s
    empty = cache / "empty"
    empty.mkdir(exist_ok=True)
    images: dict[str, dict[str, object]] = {}
    for service in services:
        image = f"localhost/tamto-{service}:{tag}"
        build(
            engine,
            empty,
            image,
            *args,
            "service",
            "--build-arg",
            f"RUNTIME={runtime}",
            "--build-arg",
            f"SERVICE={service}",
        )
        images[service] = {"image": image, "bytes": image_size(engine, image)}
    return {
        "base": base_image,
        "base_seconds": round(base_s, 1),
        "context_seconds": round(context_s, 1),
        "runtime_seconds": round(runtime_s, 1),
        "images": images,
        "seconds": round(time.monotonic() - started, 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--base",
        default=PUBLIC_BASE,
        help=f"base image, or `debian` for one built with mmdebstrap (default {PUBLIC_BASE})",
    )
    parser.add_argument("--services", nargs="+", choices=SERVICES, default=list(SERVICES))
    parser.add_argument("--tag", default=workspace_version(), help="tag of every image")
    parser.add_argument("--engine", default="podman", help="podman, or docker")
    parser.add_argument("--json", action="store_true", help="print what was built as JSON")
    args = parser.parse_args(argv)
    report = build_all(args.services, args.base, args.tag, args.engine, cache_dir())
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"base {report['base']} ({report['base_seconds']} s)")
    print(f"build context ({report['context_seconds']} s)")
    print(f"the images' shared stages ({report['runtime_seconds']} s)")
    for built in report["images"].values():  # type: ignore[attr-defined]
        print(f"{built['image']}: {built['bytes'] / 1e6:.0f} MB")
    print(f"total {report['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
