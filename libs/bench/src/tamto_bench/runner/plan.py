"""The plan of a run: which phases run, in what order, size by size, each a label and
the workload it runs."""

from __future__ import annotations

from functools import partial

from tamto_bench.runner import baselines, durable, ephemeral, freshness, gateway_protocols
from tamto_bench.runner.context import Bench
from tamto_bench.runner.options import (
    CLUSTER_SYSTEMS,
    FAN_OUT,
    FUNCTION_SIZES,
    HTTP_BODIES,
    PER_MESSAGE_SIZES,
    REQUEST_SHAPES,
    SEQUENTIAL_SIZES,
    Phase,
)


def phases(bench: Bench) -> list[Phase]:
    """Every phase, size by size: Tamto, JetStream, core NATS, then the ceiling."""
    return [phase for size in bench.options.sizes for phase in _size_phases(bench, size)]


def _size_phases(bench: Bench, size: int) -> list[Phase]:
    """The phases at one size, system by system."""
    o = bench.options
    plan: list[Phase] = []
    if "tamto" in o.systems:
        batches = "ceiling" in o.systems or "http" in o.systems
        plan += _durable_phases(bench, "tamto", size, batches=batches)
    plan += _http_phases(bench, size)
    plan += _mqtt_phases(bench, size)
    if "jetstream" in o.systems:
        plan += _durable_phases(bench, "jetstream", size)
    for system in CLUSTER_SYSTEMS:
        if system in o.systems:
            plan += _durable_phases(bench, system, size)
    if "core" in o.systems:
        plan.append((f"core NATS pub/sub {size} B", partial(ephemeral.core_pubsub, bench, size)))
        plan += _latency_phases(bench, "core", size, "core NATS")
    if "ceiling" in o.systems:
        plan.append((f"bare ceiling {size} B", partial(baselines.ceiling, bench, size)))
    if "ephemeral" in o.systems:
        plan += _ephemeral_phases(bench, size, first=size == o.sizes[0])
    if "functions" in o.systems and size in FUNCTION_SIZES:
        plan.append((f"functions {size} B", partial(baselines.functions, bench, size)))
    if "freshness" in o.systems and size == o.sizes[0]:
        plan += [
            (f"freshness, {store} store {size} B", partial(freshness.freshness, bench, store, size))
            for store in freshness.STORES
        ]
    return plan


def _latency_phases(bench: Bench, system: str, size: int, label: str = "") -> list[Phase]:
    """Publish→deliver latency at each of the run's rates."""
    return [
        (
            f"{label or system} latency {size} B @ {rate:g}/s",
            partial(durable.latency, bench, system, size, rate),
        )
        for rate in bench.options.rates
    ]


def _batch_phase(bench: Bench, size: int) -> Phase:
    return (f"tamto publish {size} B (send_batch)", partial(durable.publish_batches, bench, size))


def _durable_phases(bench: Bench, system: str, size: int, batches: bool = False) -> list[Phase]:
    """A system's durable workloads: publish, the everyday calls, consume+ack,
    (Tamto's `send_batch` publish, if `batches`), latency at every rate."""
    plan: list[Phase] = [
        (f"{system} publish {size} B", partial(durable.publish, bench, system, size))
    ]
    plan += _everyday_phases(bench, system, size)
    plan.append((f"{system} consume+ack {size} B", partial(durable.drain, bench, system, size)))
    if batches:
        plan.append(_batch_phase(bench, size))
    return plan + _latency_phases(bench, system, size)


def _everyday_phases(bench: Bench, system: str, size: int) -> list[Phase]:
    """The everyday calls: sequential durable publish at `SEQUENTIAL_SIZES`,
    per-message consuming (of the publish phase's backlog) at `PER_MESSAGE_SIZES`."""
    plan: list[Phase] = []
    if size in PER_MESSAGE_SIZES:
        plan.append(
            (
                f"{system} per-message consume {size} B",
                partial(durable.per_message, bench, system, size),
            )
        )
    if size in SEQUENTIAL_SIZES:
        plan.append(
            (
                f"{system} sequential publish {size} B",
                partial(durable.sequential, bench, system, size),
            )
        )
    return plan


def _http_phases(bench: Bench, size: int) -> list[Phase]:
    """Publishing through the gateway's HTTP API, beside the SDK's `send_batch`."""
    o, tamto = bench.options, bench.systems.tamto
    if "http" not in o.systems or tamto is None or not tamto.http_url:
        return []
    plan = [] if "tamto" in o.systems else [_batch_phase(bench, size)]  # else it ran above
    return plan + [
        (
            f"tamto publish {size} B over HTTP ({body})",
            partial(gateway_protocols.http, bench, size, body),
        )
        for body in HTTP_BODIES
    ]


def _mqtt_phases(bench: Bench, size: int) -> list[Phase]:
    """The gateway's MQTT broker beside mosquitto (idle connections at the first size)."""
    o = bench.options
    if "mqtt" not in o.systems or not gateway_protocols.has_mqtt(bench):
        return []
    plan: list[Phase] = [
        (f"mqtt {size} B beside mosquitto", partial(gateway_protocols.mqtt, bench, size))
    ]
    if size == o.sizes[0] and o.mqtt_idle:
        plan.append(
            (f"mqtt {o.mqtt_idle} idle connections", partial(gateway_protocols.mqtt_idle, bench))
        )
    return plan


def _ephemeral_phases(bench: Bench, size: int, first: bool) -> list[Phase]:
    """Ephemeral pub/sub and latency per size; fan-out and request/reply once (at the
    first size), each beside core NATS when the run has it."""
    plan: list[Phase] = [
        (f"ephemeral pub/sub {size} B", partial(ephemeral.ephemeral_pubsub, bench, size)),
        *_latency_phases(bench, "ephemeral", size),
    ]
    if first:
        plan += _once_phases(bench, "ephemeral", "ephemeral", size)
        if "core" in bench.options.systems:
            plan += _once_phases(bench, "core", "core NATS", size)
    return plan


def _once_phases(bench: Bench, system: str, label: str, size: int) -> list[Phase]:
    """Fan-out, request/reply in every shape and one message at a time, on `system`."""
    return [
        (f"{label} fan-out x{FAN_OUT} {size} B", partial(ephemeral.fan_out, bench, system, size)),
        (f"{label} request/reply {size} B", partial(ephemeral.request_reply, bench, system, size)),
        *(
            (
                f"{label} request/reply {key} {size} B",
                partial(ephemeral.request_reply, bench, system, size, key, workers, window),
            )
            for key, workers, window in REQUEST_SHAPES
        ),
        (f"{label} one at a time {size} B", partial(ephemeral.one_at_a_time, bench, system, size)),
    ]
