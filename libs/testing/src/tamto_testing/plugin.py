"""pytest fixtures: real infrastructure, chained infra -> cluster -> client.

- `tamto_infra` (session): running etcd and NATS.
- `etcd_endpoint`, `nats_url` (session): their addresses.
- `etcd_client` (function): an etcd client connected to that etcd.
- `s3_server` (session): a real S3 server (SeaweedFS) with the bucket of `tamto_local.s3`.
- `tamto_cluster` (module): auth, storage, router and gateway as processes. Module, not
  session: every cluster of a test run registers in the one etcd, and a cluster left
  running would join the placement of the next module's own clusters.
- `fresh_cluster` (function): a cluster of its own, for tests that crash services.
- `tamto_client` (function): an SDK client connected to `tamto_cluster`.
- `any_path_client` (function, two params): the same, once publishing through the
  gateway and once straight to the owner routers (`ClientOptions.direct`, the direct
  path of docs/cluster.md section 5), for semantics tests that must hold on both.
- `pytest_configure`: where the environment forbids bytecode files
  (PYTHONDONTWRITEBYTECODE), the processes tests start, and this one from then on,
  cache it outside the checkout instead (`cache_child_bytecode`, `cache_own_bytecode`);
  under pytest-xdist each worker, and every process it starts, hands out ports from a
  range of its own (`confine_worker_ports`).
- `spark` (session): one local SparkSession with the `tamto` data source; skipped,
  saying so, where PySpark or tamto-spark is not installed (tamto-testing does not
  require them: only the Spark tests use this fixture), failed under CI=true.
- `pytest_collection_modifyitems`, `pytest_runtest_setup`: a test marked
  `tamto_testing.needs.needs(reason)` is skipped (failed under CI=true, before its
  fixtures start anything). Under pytest-xdist, files are collected heaviest first
  (the ini option `tamto_file_durations`, `tamto_testing.file_order`), the order in
  which `--dist loadfile --no-loadscope-reorder` hands them to the workers.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING

import aetcd
import pytest

import tamto_sdk
from tamto_common.config import parse_endpoints
from tamto_common.membership import connect_etcd
from tamto_local.ports import PORT_RANGE_VARIABLE, worker_port_range
from tamto_local.s3 import S3Spec
from tamto_testing.cluster import TestCluster
from tamto_testing.file_order import by_weight, read_weights
from tamto_testing.infra import Infra, running_infra
from tamto_testing.needs import MARK, fail_marked, missing, skip_marked
from tamto_testing.s3 import s3_server as run_s3_server

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def cache_child_bytecode(environ: MutableMapping[str, str]) -> Path | None:
    """Let the Python processes started with `environ` cache compiled bytecode, outside
    the checkout: where PYTHONDONTWRITEBYTECODE is set (and no PYTHONPYCACHEPREFIX),
    drop it and point PYTHONPYCACHEPREFIX at a directory of this user's in the system's
    temporary directory. Returns that directory, or None when `environ` is left alone.

    Without a cache every process a test starts (each service of each cluster, each
    `tamto` command) compiled every module it imports from source again: half of the
    CPU time of `tamto --help`, 2.1 s of 4 at load 9. Python checks a cached file
    against its source's size and modification time, as in `__pycache__`.
    """
    if not environ.get("PYTHONDONTWRITEBYTECODE") or environ.get("PYTHONPYCACHEPREFIX"):
        return None
    prefix = Path(tempfile.gettempdir()) / f"tamto-pycache-{os.getuid()}"
    prefix.mkdir(mode=0o700, exist_ok=True)
    del environ["PYTHONDONTWRITEBYTECODE"]
    environ["PYTHONPYCACHEPREFIX"] = str(prefix)
    return prefix


def confine_worker_ports(environ: MutableMapping[str, str]) -> tuple[int, int] | None:
    """Under pytest-xdist, set `TAMTO_PORT_RANGE` in `environ` to this worker's slice of
    the ports (`tamto_local.ports.worker_port_range`) and return it; None elsewhere.

    Without it two workers could pick the same free port, and one's server found it
    taken when it bound it ("Address already in use")."""
    worker, count = environ.get("PYTEST_XDIST_WORKER"), environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not worker or not count or not worker.startswith("gw"):
        return None
    low, high = worker_port_range(int(worker.removeprefix("gw")), int(count))
    environ[PORT_RANGE_VARIABLE] = f"{low}-{high}"
    return low, high


#: The ini option naming the file of seconds per test file (`tamto_testing.file_order`).
FILE_DURATIONS = "tamto_file_durations"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        FILE_DURATIONS,
        "seconds per test file, the heaviest handed to xdist workers first "
        "(tamto_testing.file_order)",
        type="paths",
        default=[],
    )


def cache_own_bytecode(prefix: Path | None) -> None:
    """Let this process, from now on, cache the bytecode of what it imports under `prefix`
    (`cache_child_bytecode`'s directory; nothing when None): the test modules, with
    pytest's assertion rewriting, and what they import. Without it a run in one process
    (`-n 0`, the `solo` pass) compiled every module again from source, 60% of its 24 CPU
    seconds of collection."""
    if prefix is not None:
        sys.dont_write_bytecode = False
        sys.pycache_prefix = str(prefix)


def pytest_configure(config: pytest.Config) -> None:
    cache_own_bytecode(cache_child_bytecode(os.environ))
    confine_worker_ports(os.environ)
    config.addinivalue_line(
        "markers",
        f"{MARK}(reason): the test needs a tool this machine lacks when reason is not None "
        "(skipped; failed under CI=true): tamto_testing.needs",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_marked(items)
    durations: list[Path] = config.getini(FILE_DURATIONS)
    if durations and os.environ.get("PYTEST_XDIST_WORKER"):
        items[:] = by_weight(items, read_weights(durations[0]))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    fail_marked(item)


@pytest.fixture(scope="session")
def tamto_infra(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Infra]:
    with running_infra(tmp_path_factory.mktemp("infra")) as infra:
        yield infra


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Spec]:
    with run_s3_server(tmp_path_factory.mktemp("s3")) as spec:
        yield spec


@pytest.fixture(scope="session")
def etcd_endpoint(tamto_infra: Infra) -> str:
    return tamto_infra.etcd_endpoint


@pytest.fixture
async def etcd_client(etcd_endpoint: str) -> AsyncIterator[aetcd.Client]:
    client = await connect_etcd(parse_endpoints(etcd_endpoint))
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture(scope="session")
def nats_url(tamto_infra: Infra) -> str:
    return tamto_infra.nats_url


@pytest.fixture(scope="module")
def tamto_cluster(
    tamto_infra: Infra, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestCluster]:
    with TestCluster(tmp_path_factory.mktemp("cluster"), tamto_infra).running() as cluster:
        yield cluster


@pytest.fixture
def fresh_cluster(tamto_infra: Infra, tmp_path: Path) -> Iterator[TestCluster]:
    with TestCluster(tmp_path / "cluster", tamto_infra).running() as cluster:
        yield cluster


@pytest.fixture
async def tamto_client(tamto_cluster: TestCluster) -> AsyncIterator[tamto_sdk.Client]:
    async with tamto_sdk.connect(tamto_cluster.url, api_key=tamto_cluster.credential) as c:
        yield c


@pytest.fixture(params=["proxied", "direct"])
async def any_path_client(
    request: pytest.FixtureRequest, tamto_cluster: TestCluster
) -> AsyncIterator[tamto_sdk.Client]:
    options = tamto_sdk.ClientOptions(direct=request.param == "direct")
    async with tamto_sdk.connect(
        tamto_cluster.url, api_key=tamto_cluster.credential, options=options
    ) as client:
        yield client


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """ONE local SparkSession for the whole test run (the JVM takes ~10 s to start).

    `local[2,3]`: two cores, and a failed task is tried up to 3 times, as on a
    cluster, so tests can see a retried task. Python workers run this
    interpreter; `tamto` is registered as a data source.
    """
    for module, package in (("pyspark", "pyspark"), ("tamto_spark", "tamto-spark")):
        try:
            importlib.import_module(module)
        except ImportError:
            missing(f"the spark fixture needs {package} installed")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from tamto_spark.datasource import register

    session = (
        SparkSession.builder.master("local[2,3]")
        .appName("tamto-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()
