"""The freshness rows: how long after its durable ack a message is visible to a reader of
the segment store (a directory, or S3 on SeaweedFS) and of the stream's Iceberg table.

Each store kind gets a local one-node Tamto of its own, started for the phase (as
`tamto up --segment-store` starts one: "s3" runs SeaweedFS, a directory is a
``file://`` URI, and an Iceberg SQL catalog on SQLite either way), so the run's other
phases do not carry its processes. On one stream of `--partitions` partitions a
probe producer publishes one message every `PROBE_PERIOD_S` with ``send_and_wait``,
each keyed to the next partition, and notes its partition, offset and ack time; a
watcher per reader polls it every `POLL_PERIOD_S` (`tamto_bench.freshness_readers`).
Twice: at rest (the probes alone), then under load (the run's producers publish at
the run's highest `--rates` rate into the same stream while the probes run). After
the probes, the watchers go on until each shows every probe (or `VISIBLE_LIMIT_S`
passes: the rest count as unseen). Freshness per probe and reader is
`tamto_bench.freshness`'s arithmetic; the storage node's CPU over each window is the
cost side (what a shorter seal age costs).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from typing import Any

import psutil

import tamto_sdk
from tamto_bench.freshness import Probe, summary, visible_after
from tamto_bench.freshness_readers import IcebergReader, Reader, StoreReader, Watcher
from tamto_bench.harness import TamtoTarget, local_tamto, service_pids
from tamto_bench.pool import BenchError
from tamto_bench.runner.context import Bench
from tamto_bench.spec import JobSpec
from tamto_protocol.partitioning import partition_for_key

#: The store kinds measured, each a phase.
STORES = ("dir", "s3")
PROBE_PERIOD_S = 0.1
POLL_PERIOD_S = 0.1
#: Seconds of probes at rest and under load (`--quick`: the short one).
WINDOW_S = 20.0
QUICK_WINDOW_S = 3.0
#: How long after the last probe the watchers may take to show every probe.
VISIBLE_LIMIT_S = 60.0
#: How long the load's producers may take to start publishing, and how long they
#: publish beyond the probes' window (their start is not seen at once). The load's
#: window opens once its producers are connected (the pool's gate), and the probes
#: start as soon as its first messages are seen, so `--quick`'s short lead still covers
#: the probes' window.
_LOAD_START_S = 60.0
_LOAD_LEAD_S = 15.0
_QUICK_LOAD_LEAD_S = 3.0


def seal_settings(options_seal_age_ms: int) -> dict[str, int]:
    """The storage node's sealing settings in effect (`--seal-age-ms`, else its defaults)."""
    from tamto_storage.config import StorageConfig

    defaults: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(StorageConfig)}
    return {
        "seal_age_ms": options_seal_age_ms or int(defaults["seal_age_ms"]),
        "seal_check_ms": int(defaults["seal_check_ms"]),
        "segment_bytes": int(defaults["segment_bytes"]),
    }


async def freshness(bench: Bench, store: str, size: int) -> None:
    """Freshness at rest and under load on a Tamto whose segment store is `store`."""
    o = bench.options
    workdir = bench.workdir / f"freshness-{store}"
    uri = "s3" if store == "s3" else f"file://{workdir / 'store'}"
    async with local_tamto(workdir, segment_store=uri, env=o.storage_env()) as target:
        storage = psutil.Process((await service_pids(target.etcd))["storage"])
        client = await tamto_sdk.connect(target.url, api_key=target.api_key)
        async with client:
            stream = bench.stream(f"fresh-{store}", size)
            await client.streams.ensure(stream, partitions=o.partitions)
            readers: dict[str, Reader] = {
                "store": StoreReader(target.segment_store, stream, o.partitions),
                "iceberg": IcebergReader(target.iceberg_catalog, target.segment_store, stream),
            }
            values: dict[str, Any] = {**seal_settings(o.seal_age_ms)}
            for state, rate in (("rest", 0.0), ("load", max(o.rates))):
                values[state] = await _measure(
                    bench, client, target, stream, size, readers, rate, storage
                )
    bench.record(size, "freshness", {store: values})


async def _measure(
    bench: Bench,
    client: tamto_sdk.Client,
    target: TamtoTarget,
    stream: str,
    size: int,
    readers: dict[str, Reader],
    rate: float,
    storage: psutil.Process,
) -> dict[str, Any]:
    """One window of probes (under `rate` msg/s of load when > 0), and what each reader
    showed of them."""
    window = QUICK_WINDOW_S if bench.options.quick else WINDOW_S
    load = None
    if rate:
        load = asyncio.create_task(_load(bench, target, stream, size, rate, window))
        await _until_loaded(client, stream, load)
    stop = asyncio.Event()
    watchers = {name: Watcher(reader, POLL_PERIOD_S) for name, reader in readers.items()}
    polls = [asyncio.create_task(w.run(stop)) for w in watchers.values()]
    cpu = storage.cpu_times()
    started = time.monotonic()
    try:
        probes = await _probe(client, stream, size, bench.options.partitions, window)
        elapsed = time.monotonic() - started
        after = storage.cpu_times()
        loaded = await load if load is not None else 0.0
        for watcher in watchers.values():
            watcher.expect(probes)
        seen = (w.showed_all.wait() for w in watchers.values())
        with contextlib.suppress(TimeoutError):  # the rest count as unseen
            await asyncio.wait_for(asyncio.gather(*seen), VISIBLE_LIMIT_S)
    finally:
        stop.set()
        await asyncio.gather(*polls)
    out: dict[str, Any] = {
        "load_msgs_s": loaded,
        "window_s": elapsed,
        "storage_cpu_per_s": (after.user + after.system - cpu.user - cpu.system) / elapsed,
    }
    for name, watcher in watchers.items():
        found = summary(visible_after(probes, watcher.sightings))
        found["poll_errors"] = watcher.errors
        found["slowest_poll_s"] = watcher.slowest_s
        out[name] = found
    store = readers["store"]
    if isinstance(store, StoreReader):
        out["segments"] = store.segments
    return out


def _partition_keys(partitions: int) -> list[bytes]:
    """One key per partition, in partition order."""
    keys: dict[int, bytes] = {}
    i = 0
    while len(keys) < partitions:
        key = f"probe-{i}".encode()
        keys.setdefault(partition_for_key(key, partitions), key)
        i += 1
    return [keys[p] for p in range(partitions)]


async def _probe(
    client: tamto_sdk.Client, stream: str, size: int, partitions: int, window: float
) -> list[Probe]:
    """Publish one message every `PROBE_PERIOD_S` for `window` s, partition after
    partition, each awaited until durable; each one's place and ack time."""
    keys = _partition_keys(partitions)
    payload = bytes(size)
    probes: list[Probe] = []
    async with client.producer(stream, linger_s=0) as producer:
        start = time.monotonic()
        while (due := start + len(probes) * PROBE_PERIOD_S) < start + window:
            await asyncio.sleep(max(0.0, due - time.monotonic()))  # pacing, not a wait
            done = await producer.send_and_wait(payload, key=keys[len(probes) % partitions])
            probes.append(Probe(done.partition, done.offset, time.time()))
    return probes


async def _load(
    bench: Bench, target: TamtoTarget, stream: str, size: int, rate: float, window: float
) -> float:
    """The run's producers publishing `rate` msg/s in all into `stream` for the probes'
    window (and the time they take to start); the rate they reached."""
    o = bench.options
    duration = window + (_QUICK_LOAD_LEAD_S if o.quick else _LOAD_LEAD_S)
    spec = JobSpec(
        system="tamto",
        role="pub",
        target=target.url,
        stream=stream,
        size=max(size, 8),
        duration_s=duration,
        api_key=target.api_key,
        rate=rate / o.producers,
        window=o.window,
    )
    results = await bench.run(f"freshness load {rate:g}/s", [spec] * o.producers, duration)
    return sum(r.in_window for r in results) / duration


async def _until_loaded(client: tamto_sdk.Client, stream: str, load: asyncio.Task[float]) -> None:
    """Wait until the load's messages arrive in `stream` (its producers have started)."""
    deadline = time.monotonic() + _LOAD_START_S
    before = await _messages(client, stream)
    while await _messages(client, stream) <= before + 100:
        if load.done():
            load.result()  # its error, if it failed
            raise BenchError("freshness: the load finished before it was seen")
        if time.monotonic() > deadline:
            raise BenchError(f"freshness: no load arrived within {_LOAD_START_S:.0f} s")
        await asyncio.sleep(POLL_PERIOD_S)


async def _messages(client: tamto_sdk.Client, stream: str) -> int:
    return sum(p.messages for p in (await client.streams.stats(stream)).partitions)
