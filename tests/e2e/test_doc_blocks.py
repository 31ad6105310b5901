"""Every code block of README.md and docs/*.md runs against a real system.

A fenced `python`, `bash`, `sh`, `console` or `shell` block is either run here, run by
another test named in `RUN_ELSEWHERE`, or listed in `NOT_RUN` with the reason it cannot
run on a test machine; `test_every_block_is_accounted_for` fails on a shell block that is
none of these.

- Python blocks run in an async main on the module's cluster: a block that opens its own
  client (`connect(...)`) gets the cluster's URL for the placeholder one and `KEY` for
  the key; any other block gets `client`, an open client (and `consumer`, one of a
  prepared stream, where `SNIPPETS` says so). `handle` and `record` stand for the
  application's code. A block that consumes forever runs until `SNIPPETS` says it did
  its work, then is cancelled.
- Shell blocks run one command at a time as the venv's `tamto` (`./dev` is `tamto`
  there), with `TAMTO_URL`, `TAMTO_API_KEY` and `TAMTO_ETCD_ENDPOINTS` in the
  environment; a command that runs until stopped (`tamto sub` without `--count`) is fed
  messages until its output shows them, then stopped (`STREAMING`). A responder answers
  requests to topic `svc.echo` of the ephemeral stream `rpc` while a block runs. Only
  `tamto` commands run: a block with any other command must be listed.

Blocks of other languages (json, layouts of files) are not code.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import tamto_sdk
from tamto_sdk import EphemeralConfig, SubscriptionType
from tamto_testing.cluster import TestCluster
from tamto_testing.waiting import eventually
from tests.doc_blocks import DOC_URL, SPARK_BLOCKS, Block, code_blocks

pytestmark = pytest.mark.e2e

TAMTO = str(Path(sys.executable).with_name("tamto"))


#: Blocks another test runs as they are, and which one.
RUN_ELSEWHERE = {
    "README.md: ./dev up --demo     # bring up etcd, NATS, auth, storage, router, gateway; "
    "publish and consume": "tests/e2e/test_launcher.py::"
    "test_up_demo_publishes_and_consumes_then_stops runs `tamto up --demo --once`; "
    "`./dev test` is the whole suite, which no test runs from inside itself",
    'README.md: H=http://127.0.0.1:PORT; K="X-Api-Key: <the development API key>"': (
        "tests/e2e/test_http_api.py::test_the_readme_curl_walkthrough_runs"
    ),
    "docs/spark.md: uv run python pipelines/traffic_report.py --data-dir .tamto/storage "
    "--stream orders --out out/traffic": "tests/spark/test_spark_write_and_pipelines.py runs "
    "each pipeline's code on the test run's SparkSession (as its own command each would "
    "start a JVM, about a minute here) and tests/spark/test_pipeline_commands.py runs "
    "traffic_report.py under spark-submit with a local master (a remote spark://host:7077 "
    "is not here)",
    "README.md: tamto up      # in another terminal; it prints each gateway's MQTT address": (
        "tests/e2e/test_mqtt.py::test_the_readme_mosquitto_walkthrough_runs, on that module's "
        "MQTT cluster (it stands for the block's `tamto up`)"
    ),
    **{
        key: "tests/spark/test_spark_doc_blocks.py, on the test run's SparkSession"
        for key in SPARK_BLOCKS
    },
}

#: Blocks no test can run here, and why.
NOT_RUN = {
    "docs/mqtt.md: TAMTO_GATEWAY_MQTT_PORT=1883 TAMTO_GATEWAY_MQTT_STREAM=mqtt tamto up": (
        "a foreground `tamto up` on a fixed port; tests/e2e/test_mqtt_interop.py runs a "
        "gateway with one stream for every topic"
    ),
    'docs/segments.md: spark.read.parquet("/shared/segments/streams/orders")            '
    "# a directory store": (
        "reads of a shared directory and an S3 store (placeholders: PORT, credentials); "
        "tests/spark/test_spark_segment_store.py reads the store with Spark, DuckDB, "
        "Polars and pyarrow"
    ),
    'docs/segments.md: spark.read.format("tamto").load("file:///shared/segments/streams/orders")': (
        "reads of a shared directory and an S3 store (placeholders: KEY, SECRET, host:port); "
        "tests/spark/test_spark_segment_store.py and tests/spark/test_spark_s3_store.py read "
        "both with the tamto source"
    ),
    'docs/spark.md: spark.read.format("tamto").load("file:///shared/segments/streams/orders")': (
        "the same reads as docs/segments.md's block (placeholders: a shared store, KEY, "
        "SECRET); tests/spark/test_spark_segment_store.py and test_spark_s3_store.py run them"
    ),
    "docs/mqtt.md: TAMTO_GATEWAY_MQTT_PORT=1883 tamto up      "
    "# a local system whose gateway serves MQTT on 1883": (
        "a foreground `tamto up` on a fixed port; tests/e2e/test_launcher.py runs `tamto up`"
    ),
    "docs/benchmarks.md: ./dev bench --local --quick                  "
    "# ~1.5 min: 1 s windows, latency at 5,000/s": (
        "minutes of measurement at full load; tests/bench/test_bench_quick.py runs "
        "`tamto bench --local --quick` in a reduced form"
    ),
    "docs/recovery.md: tamto chaos --duration 600 --seed 19 --json report.json   "
    "# the acceptance run": (
        "a 10-minute fault campaign; tests/e2e/test_chaos.py runs the same campaign short"
    ),
    "docs/testing.md: ./dev test                                   "
    "# everything CI checks (below)": "runs the whole suite, from which it is run",
    "docs/testing.md: apt-get install -y podman runc": (
        "installs system packages and runs the whole suite in containers; `.ci/run` does"
    ),
    "docs/testing.md: TAMTO_LONG_TESTS=1 ./dev task pytest -- <test path>": (
        "a template (<test path>) for running a long campaign"
    ),
}


# --- Python blocks ---------------------------------------------------------------------


@dataclass
class Harness:
    """What a Python block's names stand for, and what it did."""

    handled: list[bytes] = field(default_factory=list)
    recorded: list[Any] = field(default_factory=list)

    def names(self, cluster: TestCluster) -> dict[str, Any]:
        return {
            "tamto_sdk": tamto_sdk,
            "KEY": cluster.credential,
            "handle": self.handled.append,
            "record": self.recorded.append,
        }


@dataclass(frozen=True)
class Snippet:
    """How a Python block that needs more than running runs: text replaced, the work it
    must have done before it is cancelled, and what the test feeds it meanwhile."""

    replace: tuple[tuple[str, str], ...] = ()
    #: A block that takes `consumer` gets one of the prepared `orders` stream.
    consumer: bool = False
    done: Callable[[Harness], bool] | None = None
    feed: Callable[[tamto_sdk.Client], Awaitable[None]] | None = None


async def publish_quote(client: tamto_sdk.Client) -> None:
    async with client.ephemeral_producer("quotes") as producer:
        await producer.send(b"fed", topic="orders.eu")


SNIPPETS = {
    "README.md: import tamto_sdk": Snippet(done=lambda h: bool(h.handled)),
    "docs/sdk.md: import tamto_sdk": Snippet(done=lambda h: bool(h.handled)),
    "docs/sdk.md: from tamto_sdk.tracing import processing": Snippet(
        consumer=True, done=lambda h: bool(h.handled)
    ),
    'docs/ephemeral.md: async with client.subscribe("quotes", match="orders.#", '
    'group="billing") as sub:': Snippet(
        replace=(("        ...", "        record(message)"),),
        done=lambda h: bool(h.recorded),
        feed=publish_quote,
    ),
}


def as_main(block: Block, url: str) -> str:
    """The block as `async def main(client)`, its placeholders filled."""
    text = block.text.replace(DOC_URL, url)
    for old, new in SNIPPETS.get(block.key, Snippet()).replace:
        assert old in text, f"{block.key}: {old!r} is no longer in the block"
        text = text.replace(old, new)
    return "async def main(client):\n" + textwrap.indent(text, "    ") + "    pass\n"


async def run_python(block: Block, cluster: TestCluster, client: tamto_sdk.Client) -> None:
    harness = Harness()
    names = harness.names(cluster)
    exec(compile(as_main(block, cluster.url), f"{block.page}:{block.line}", "exec"), names)
    snippet = SNIPPETS.get(block.key, Snippet())
    async with contextlib.AsyncExitStack() as stack:
        if snippet.consumer:
            names["consumer"] = await stack.enter_async_context(
                client.consumer("orders", "doc-blocks", subscription_type=SubscriptionType.SHARED)
            )
        await run_main(block, names["main"](client), snippet, harness, client)


async def run_main(
    block: Block,
    main: Coroutine[Any, Any, None],
    snippet: Snippet,
    harness: Harness,
    client: tamto_sdk.Client,
) -> None:
    """Run the block's main to its end, or until it did its work (then cancel it)."""
    task = asyncio.create_task(main)
    if snippet.done is None:
        await asyncio.wait_for(task, 60)
        return
    done = snippet.done

    async def did_its_work() -> bool:
        if task.done():
            task.result()
            raise AssertionError(f"{block.key} ended before doing its work")
        if snippet.feed is not None:
            await snippet.feed(client)
        return done(harness)

    try:
        await eventually(did_its_work, 60, f"{block.key} to do its work")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# --- Shell blocks ----------------------------------------------------------------------


@dataclass(frozen=True)
class Streaming:
    """A command that runs until stopped (or until its --count): the command fed to it
    meanwhile and the text its output must show."""

    feed: str
    shows: str | None


STREAMING = {
    "tamto sub demo -s workers --type shared --start latest": Streaming(
        "echo fed | tamto pub demo", "fed"
    ),
    "tamto sub quotes --match 'orders.#' --group billing": Streaming(
        "tamto pub quotes --topic orders.eu fed", "fed"
    ),
    "tamto sub quotes --match 'orders.#' --group billing --count 10": Streaming(
        "tamto pub quotes --topic orders.eu a b c", None
    ),
}
#: Commands whose documented outcome is an exit code other than 0.
EXIT_CODES: dict[str, int] = {}


def commands(block: Block, key: str) -> list[str]:
    """The block's commands, `./dev` as `tamto`, prompts, comments and continuations gone,
    the placeholder key filled."""
    joined = re.sub(r"\\\n\s*", " ", block.text)
    found = []
    for line in joined.splitlines():
        line = line.strip()
        if block.lang == "console":
            if not line.startswith("$ "):
                continue  # output
            line = line[2:]
        line = re.sub(r"\s+#.*$", "", line).strip()
        if not line or line.startswith("#"):
            continue
        line = line.replace("./dev ", "tamto ").replace("TAMTO_API_KEY=...", f"TAMTO_API_KEY={key}")
        found.append(line)
    return found


def is_tamto(command: str) -> bool:
    words = re.sub(r"^(\w+=\S+ )+", "", command.split("|")[-1].strip()).split()
    return bool(words) and words[0] == "tamto"


def shell_env(cluster: TestCluster) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{Path(TAMTO).parent}{os.pathsep}{os.environ['PATH']}",
        "TAMTO_URL": cluster.url,
        "TAMTO_API_KEY": cluster.credential,
        "TAMTO_ETCD_ENDPOINTS": cluster.infra.etcd_endpoint,
    }


def run_command(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f"set -o pipefail; {command}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


async def run_streaming(command: str, streaming: Streaming, env: dict[str, str]) -> None:
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", f"exec {command}", env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    out = bytearray()

    async def read() -> None:
        assert proc.stdout is not None
        while chunk := await proc.stdout.read(4096):
            out.extend(chunk)

    reader = asyncio.create_task(read())

    async def showed() -> bool:
        fed = await asyncio.to_thread(run_command, streaming.feed, env)
        assert fed.returncode == 0, f"{streaming.feed}: {fed.stderr}"
        if streaming.shows is None:
            return proc.returncode is not None
        return streaming.shows in out.decode()

    try:
        await eventually(showed, 60, f"`{command}` to show what it was fed")
        if streaming.shows is None:
            assert await proc.wait() == 0, f"`{command}`: {out.decode()}"
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
        await reader


async def run_shell(block: Block, cluster: TestCluster) -> None:
    env = shell_env(cluster)
    for command in commands(block, cluster.credential):
        if command in STREAMING:
            await run_streaming(command, STREAMING[command], env)
            continue
        done = await asyncio.to_thread(run_command, command, env)
        expected = EXIT_CODES.get(command, 0)
        assert done.returncode == expected, (
            f"{block.page}:{block.line} `{command}` exited {done.returncode}, "
            f"not {expected}\n{done.stdout}\n{done.stderr}"
        )


# --- The tests -------------------------------------------------------------------------


def runnable() -> list[Block]:
    listed = RUN_ELSEWHERE.keys() | NOT_RUN.keys()
    return [b for b in code_blocks() if b.key not in listed]


def test_every_block_is_accounted_for() -> None:
    keys = [b.key for b in code_blocks()]
    listed = RUN_ELSEWHERE.keys() | NOT_RUN.keys()
    assert not (listed - set(keys)), f"listed but no longer in the docs: {listed - set(keys)}"
    assert not (SNIPPETS.keys() - set(keys)), "SNIPPETS names a block that is gone"
    for block in runnable():
        if block.lang == "python":
            continue
        others = [c for c in commands(block, "KEY") if not is_tamto(c)]
        assert not others, (
            f"{block.page}:{block.line} runs {others}: make it a tamto command, or list "
            "the block in RUN_ELSEWHERE or NOT_RUN with the reason it cannot run here"
        )
    every_command = {c for b in runnable() if b.lang != "python" for c in commands(b, "KEY")}
    assert not (STREAMING.keys() - every_command), "STREAMING names a command that is gone"
    assert not (EXIT_CODES.keys() - every_command), "EXIT_CODES names a command that is gone"


async def prepare(cluster: TestCluster) -> None:
    async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
        await client.streams.ensure("rpc", config=EphemeralConfig())
        await client.streams.ensure("orders", partitions=3)
        async with client.producer("orders") as producer:
            for i in range(600):
                await producer.send(b"order %d" % i, key=b"customer-%d" % i)
        async with client.consumer(
            "orders", "billing", subscription_type=SubscriptionType.SHARED
        ) as c:
            await anext(aiter(c))


@pytest.fixture(scope="module")
def prepared(tamto_cluster: TestCluster) -> TestCluster:
    """What the docs take as there: an ephemeral `rpc` stream and an `orders` stream with
    a few hundred messages and a subscription `billing` (docs/subscriptions-admin.md)."""
    asyncio.run(prepare(tamto_cluster))
    return tamto_cluster


def echo(message: tamto_sdk.EphemeralMessage) -> bytes:
    return message.payload


@pytest.mark.parametrize("block", runnable(), ids=lambda b: f"{b.page}:{b.line}")
async def test_the_block_runs(prepared: TestCluster, block: Block) -> None:
    async with tamto_sdk.connect(prepared.url, api_key=prepared.credential) as client:
        # The docs' requests go to topic svc.echo of stream rpc: someone answers there.
        async with client.reply_handler("rpc", echo, match="svc.echo", group="doc-blocks"):
            if block.lang == "python":
                await run_python(block, prepared, client)
            else:
                await run_shell(block, prepared)
