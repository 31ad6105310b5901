#!/usr/bin/env bash
# Serve a Docker-compatible API from podman, for the testcontainers test pass.
# Source it: `source scripts/podman-docker-api.sh` exports DOCKER_HOST and the
# testcontainers settings, or returns non-zero when podman cannot be had here.
# Needs root for apt-get (CI and the development machines run as root).

_tamto_podman_setup() {
  # shellcheck source=/dev/null
  source "$(dirname "${BASH_SOURCE[0]}")/podman-setup.sh" || return 1
  local sock=/tmp/tamto-podman.sock
  if ! [ -S "$sock" ] || ! curl -s --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; then
    rm -f "$sock"
    nohup podman system service --time=0 "unix://$sock" >/tmp/tamto-podman.log 2>&1 &
    for _ in $(seq 1 50); do
      curl -s --unix-socket "$sock" http://d/_ping >/dev/null 2>&1 && break
      sleep 0.2
    done
  fi
  curl -s --unix-socket "$sock" http://d/_ping >/dev/null 2>&1 || return 1
  export DOCKER_HOST="unix://$sock"
  export TESTCONTAINERS_RYUK_DISABLED=true         # the reaper image cannot be pulled here
  export TESTCONTAINERS_CONNECTION_MODE=docker_host # this machine itself runs in a container
  export TAMTO_TEST_CONTAINERS=1
}
_tamto_podman_setup
