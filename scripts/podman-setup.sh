#!/usr/bin/env bash
# Make rootful podman work on this kind of machine (a sandbox, itself in a container):
# install it from Debian when absent, with mmdebstrap and uidmap for the local base
# image (scripts/build_images.py --base debian), and configure the runtime. Run it, or
# source it (scripts/podman-docker-api.sh does); non-zero when podman cannot be had.
# Needs root for apt-get (CI and the development machines run as root).

_tamto_podman_install() {
  local missing=()
  command -v podman >/dev/null 2>&1 || missing+=(podman runc)
  command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
  command -v newuidmap >/dev/null 2>&1 || missing+=(uidmap)
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null 2>&1 || return 1
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

_tamto_podman_configure() {
  [ -f /etc/containers/containers.conf ] && return 0
  # crun fails on this sandbox's cgroups, and the default ulimits exceed what it allows.
  mkdir -p /etc/containers
  cat > /etc/containers/containers.conf <<'CONF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=1000:1000"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
CONF
}

_tamto_podman_install && _tamto_podman_configure && podman info >/dev/null 2>&1
