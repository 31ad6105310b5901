"""The gateway's other doors, beside the SDK's gRPC: publishing through its HTTP API
(NDJSON and Arrow bodies) and its MQTT broker beside mosquitto."""

from __future__ import annotations

from tamto_bench import mqtt_bench
from tamto_bench.pool import BenchError
from tamto_bench.runner.context import Bench
from tamto_bench.runner.options import MB
from tamto_bench.runner.stats import drain_rate


async def http(bench: Bench, size: int, body: str) -> None:
    """Publish batches of `BATCH_MESSAGES` through the gateway's HTTP API, each
    request one `body` ("ndjson" or "arrow"): beside `send_batch`'s phase."""
    o = bench.options
    tamto = bench.systems.tamto
    assert tamto is not None
    stream = bench.stream(f"http-{body}", size)
    specs = [
        bench.spec("http", "pub", stream, size, target=tamto.http_url, body=body)
        for _ in range(o.producers)
    ]
    async with bench.stream_on("tamto", stream):
        results = await bench.run(f"tamto publish over HTTP ({body})", specs, o.duration_s)
    if any(r.errors for r in results):
        raise BenchError(f"HTTP publish ({body}): {sum(r.errors for r in results)} refused")
    _total, rate = drain_rate(results)
    bench.record(
        size, "tamto", {f"http_{body}_msgs_s": rate, f"http_{body}_mb_s": rate * size / MB}
    )


def has_mqtt(bench: Bench) -> bool:
    """Whether the run can measure MQTT: mosquitto started and the gateway has a broker."""
    tamto = bench.systems.tamto
    return bench.systems.mosquitto is not None and tamto is not None and tamto.mqtt_port > 0


def _brokers(bench: Bench) -> list[mqtt_bench.Broker]:
    tamto, mosquitto = bench.systems.tamto, bench.systems.mosquitto
    assert tamto is not None
    assert mosquitto is not None
    gateway = bench.systems.pids.get("tamto", {}).get("gateway", 0)
    return [mqtt_bench.Broker("tamto", tamto.mqtt_port, tamto.api_key, gateway), mosquitto]


async def mqtt(bench: Bench, size: int) -> None:
    """QoS 0 and 1 throughput, latency and fan-out through the gateway's MQTT broker
    and mosquitto, with the same client (`mqtt_bench`)."""
    stream = bench.stream("mqtt", size)
    async with bench.stream_on("tamto", stream):
        for broker in _brokers(bench):
            values = await mqtt_bench.measure(broker, stream, size, bench.options.duration_s)
            bench.record(size, broker.name, values)


async def mqtt_idle(bench: Bench) -> None:
    """Memory per idle connection, `mqtt_idle` of them held at once, on each broker."""
    size = bench.options.sizes[0]
    for broker in _brokers(bench):
        per = await mqtt_bench.idle_memory(broker, bench.options.mqtt_idle)
        bench.record(size, broker.name, {"mqtt_idle_bytes_per_connection": per})
