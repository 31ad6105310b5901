"""Turn a run's JSON document into target verdicts, a rich table and a Markdown table."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

#: The issue's targets on a 2-core machine.
THROUGHPUT_RATIO = 10.0
LATENCY_RATE = 5000.0
LATENCY_P99_MS = 10.0
BIG_SIZE = 10240
BIG_MB_S = 150.0
CEILING_SHARE = 0.7
#: The targets for ephemeral streams, beside core NATS through nats-py.
EPHEMERAL_RATIO = 2.0
EPHEMERAL_RATIO_SIZES = (100, 1024)
EPHEMERAL_P99_MS = 5.0
#: Request/reply targets: round trips/s of one requester pipelining against core
#: NATS's, p50 one request at a time, p99 with 200 concurrent requesters.
RR_RATIO = 0.5
RR_SERIAL_P50_MS = 2.0
RR_CROWD_P99_MS = 10.0
#: The targets for the everyday calls.
SEQUENTIAL_P50_MS = 1.0
SEQUENTIAL_P99_MS = 3.0
PER_MESSAGE_MSGS_S = 250_000.0
PER_MESSAGE_RATIO = 5.0
PUBLISH_TO_DELIVER_P50_MS = 3.0
LOW_RATE = 1000.0
LATENCY_P99_BIG_MS = 20.0
#: The cluster targets: R=3 publish at least half of R=1's at 1 KiB, and
#: 10x JetStream R3's; the latency targets on the cluster are relaxed by the
#: replication round trip (`replication_round_trip_ms`).
R3_SHARE_OF_R1 = 0.5
R3_SHARE_SIZE = 1024
#: The processing service's target: a declarative filter+project function, stream to
#: stream, end to end.
FILTER_PROJECT_TARGET = 200_000.0


@dataclass(frozen=True)
class Verdict:
    """One target at one message size: the measured value, the bar, met or not."""

    target: str
    size: int
    value: float
    bar: float
    met: bool


def _num(value: Any) -> float:
    return float(value) if value is not None else math.nan


def _get(doc: dict[str, Any], size: str, system: str, key: str) -> float:
    return _num(doc["sizes"].get(size, {}).get(system, {}).get(key))


def _ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def ratios(doc: dict[str, Any], size: str) -> dict[str, float]:
    """Tamto ÷ JetStream (and ÷ ceiling) for one size.

    The ceiling's client hands over ready batches, so it is compared with Tamto's
    `send_batch` publish when the run measured it; JetStream (one publish per
    message) with Tamto's per-message `send`.
    """
    pub = _get(doc, size, "tamto", "publish_msgs_s")
    batched = _get(doc, size, "tamto", "publish_batch_msgs_s")
    return {
        "publish_vs_jetstream": _ratio(pub, _get(doc, size, "jetstream", "publish_msgs_s")),
        "consume_vs_jetstream": _ratio(
            _get(doc, size, "tamto", "consume_msgs_s"),
            _get(doc, size, "jetstream", "consume_msgs_s"),
        ),
        "publish_vs_ceiling": _ratio(
            pub if math.isnan(batched) else batched, _get(doc, size, "ceiling", "msgs_s")
        ),
    }


def verdicts(doc: dict[str, Any]) -> list[Verdict]:
    """Each target the run measured, per size where it applies."""
    out: list[Verdict] = []
    for size, systems in doc["sizes"].items():
        r = ratios(doc, size)
        # No 10x-JetStream targets at 10 KiB (above the bare
        # ceiling there); the ratios stay in the summary table.
        if "jetstream" in systems and int(size) < BIG_SIZE:
            out.append(
                Verdict(
                    "publish ≥ 10x JetStream",
                    int(size),
                    r["publish_vs_jetstream"],
                    THROUGHPUT_RATIO,
                    r["publish_vs_jetstream"] >= THROUGHPUT_RATIO,
                )
            )
            out.append(
                Verdict(
                    "consume+ack ≥ 10x JetStream",
                    int(size),
                    r["consume_vs_jetstream"],
                    THROUGHPUT_RATIO,
                    r["consume_vs_jetstream"] >= THROUGHPUT_RATIO,
                )
            )
        low = systems.get("tamto", {}).get(f"latency_{LOW_RATE:g}")
        if low is not None:
            p50 = _num(low["p50_ms"])
            bar = PUBLISH_TO_DELIVER_P50_MS
            out.append(Verdict("p50 ≤ 3 ms @ 1,000/s", int(size), p50, bar, p50 <= bar))
        latency = systems.get("tamto", {}).get(f"latency_{LATENCY_RATE:g}")
        if latency is not None:
            p99 = _num(latency["p99_ms"])
            bar = LATENCY_P99_BIG_MS if int(size) >= BIG_SIZE else LATENCY_P99_MS
            out.append(Verdict(f"p99 ≤ {bar:g} ms @ 5,000/s", int(size), p99, bar, p99 <= bar))
        if int(size) == BIG_SIZE and "tamto" in systems:
            mb = _get(doc, size, "tamto", "publish_mb_s")
            out.append(Verdict("10 KiB ≥ 150 MB/s", int(size), mb, BIG_MB_S, mb >= BIG_MB_S))
        out += _everyday_verdicts(doc, size)
        out += _cluster_verdicts(doc, size, systems)
        out += _ephemeral_verdicts(doc, size, systems)
        if "functions" in systems:
            rate = _num(systems["functions"].get("filter_project_msgs_s"))
            bar = FILTER_PROJECT_TARGET
            target = "function filter+project ≥ 200,000 msg/s"
            out.append(Verdict(target, int(size), rate, bar, rate >= bar))
        if "ceiling" in systems and "tamto" in systems:
            share = r["publish_vs_ceiling"]
            out.append(
                Verdict(
                    "≥ 70% of bare ceiling", int(size), share, CEILING_SHARE, share >= CEILING_SHARE
                )
            )
    return out


def _everyday_verdicts(doc: dict[str, Any], size: str) -> list[Verdict]:
    """Sequential durable publish latency, per-message consuming rate."""
    out: list[Verdict] = []
    p50 = _get(doc, size, "tamto", "seq_p50_ms")
    if not math.isnan(p50):
        p99 = _get(doc, size, "tamto", "seq_p99_ms")
        out.append(
            Verdict(
                "send_and_wait p50 ≤ 1 ms",
                int(size),
                p50,
                SEQUENTIAL_P50_MS,
                p50 <= SEQUENTIAL_P50_MS,
            )
        )
        out.append(
            Verdict(
                "send_and_wait p99 ≤ 3 ms",
                int(size),
                p99,
                SEQUENTIAL_P99_MS,
                p99 <= SEQUENTIAL_P99_MS,
            )
        )
    rate = _get(doc, size, "tamto", "iter_consume_msgs_s")
    if not math.isnan(rate):
        out.append(
            Verdict(
                "per-message consume ≥ 250,000 msg/s",
                int(size),
                rate,
                PER_MESSAGE_MSGS_S,
                rate >= PER_MESSAGE_MSGS_S,
            )
        )
        ratio = _ratio(rate, _get(doc, size, "jetstream", "iter_consume_msgs_s"))
        if not math.isnan(ratio):
            out.append(
                Verdict(
                    "per-message consume ≥ 5x JetStream",
                    int(size),
                    ratio,
                    PER_MESSAGE_RATIO,
                    ratio >= PER_MESSAGE_RATIO,
                )
            )
    return out


def replication_round_trip_ms(doc: dict[str, Any], size: str) -> float:
    """What replication adds to one durable append at `size`: the routers' mean server
    time per Append during the R=3 sequential publish minus the same on one node (R=1),
    both measured in this run (0 if R=3 came out faster). Sizes without a sequential
    phase take the largest measured at another size; NaN if none was."""

    def one(size: str) -> float:
        r3 = _get(doc, size, "tamto_r3", "seq_router_append_ms")
        r1 = _get(doc, size, "tamto", "seq_router_append_ms")
        return max(0.0, r3 - r1) if not (math.isnan(r3) or math.isnan(r1)) else math.nan

    here = one(size)
    if not math.isnan(here):
        return here
    others = [v for v in (one(s) for s in doc["sizes"]) if not math.isnan(v)]
    return max(others) if others else math.nan


def _cluster_verdicts(doc: dict[str, Any], size: str, systems: dict[str, Any]) -> list[Verdict]:
    """The throughput targets for R=3, and the targets on the cluster
    (latency bars relaxed by the replication round trip)."""
    out: list[Verdict] = []
    if "tamto_r3" not in systems:
        return out
    n = int(size)
    pub = _get(doc, size, "tamto_r3", "publish_msgs_s")
    if n == R3_SHARE_SIZE and "tamto" in systems:
        share = _ratio(pub, _get(doc, size, "tamto", "publish_msgs_s"))
        out.append(
            Verdict("R=3 publish ≥ 0.5x R=1", n, share, R3_SHARE_OF_R1, share >= R3_SHARE_OF_R1)
        )
    if "jetstream_r3" in systems:
        ratio = _ratio(pub, _get(doc, size, "jetstream_r3", "publish_msgs_s"))
        out.append(
            Verdict(
                "R=3 publish ≥ 10x JetStream R3",
                n,
                ratio,
                THROUGHPUT_RATIO,
                ratio >= THROUGHPUT_RATIO,
            )
        )
    trip = replication_round_trip_ms(doc, size)
    relax = 0.0 if math.isnan(trip) else trip

    def at_most(target: str, value: float, bar: float) -> None:
        out.append(Verdict(target, n, value, bar + relax, value <= bar + relax))

    if "seq_p50_ms" in systems["tamto_r3"]:
        at_most(
            "R=3 send_and_wait p50 ≤ 1 ms + rt",
            _get(doc, size, "tamto_r3", "seq_p50_ms"),
            SEQUENTIAL_P50_MS,
        )
        at_most(
            "R=3 send_and_wait p99 ≤ 3 ms + rt",
            _get(doc, size, "tamto_r3", "seq_p99_ms"),
            SEQUENTIAL_P99_MS,
        )
    low = systems["tamto_r3"].get(f"latency_{LOW_RATE:g}")
    if low is not None:
        at_most("R=3 p50 ≤ 3 ms + rt @ 1,000/s", _num(low["p50_ms"]), PUBLISH_TO_DELIVER_P50_MS)
    high = systems["tamto_r3"].get(f"latency_{LATENCY_RATE:g}")
    if high is not None:
        bar = LATENCY_P99_BIG_MS if n >= BIG_SIZE else LATENCY_P99_MS
        at_most(f"R=3 p99 ≤ {bar:g} ms + rt @ 5,000/s", _num(high["p99_ms"]), bar)
    rate = _get(doc, size, "tamto_r3", "iter_consume_msgs_s")
    if not math.isnan(rate):
        out.append(
            Verdict(
                "R=3 per-message consume ≥ 250,000 msg/s",
                n,
                rate,
                PER_MESSAGE_MSGS_S,
                rate >= PER_MESSAGE_MSGS_S,
            )
        )
    return out


def cluster_rows(doc: dict[str, Any]) -> list[list[str]]:
    """The cluster beside one node: metric, size, Tamto R=1, Tamto R=3, R=3/R=1,
    JetStream R3, Tamto R=3/JetStream R3."""
    out: list[list[str]] = []
    for size, systems in doc["sizes"].items():
        if "tamto_r3" not in systems and "jetstream_r3" not in systems:
            continue

        def row(label: str, key: str, size: str = size) -> list[str]:
            r1, r3 = _get(doc, size, "tamto", key), _get(doc, size, "tamto_r3", key)
            js = _get(doc, size, "jetstream_r3", key)
            return [
                label,
                size,
                _fmt(r1),
                _fmt(r3),
                _fmt(_ratio(r3, r1), "x"),
                _fmt(js),
                _fmt(_ratio(r3, js), "x"),
            ]

        out.append(row("publish msg/s", "publish_msgs_s"))
        out.append(row("publish MB/s", "publish_mb_s"))
        out.append(row("consume+ack msg/s", "consume_msgs_s"))
        for label, key in (
            ("send_and_wait one at a time msg/s", "seq_publish_msgs_s"),
            ("send_and_wait p50 ms", "seq_p50_ms"),
            ("send_and_wait p99 ms", "seq_p99_ms"),
            ("router Append mean ms (send_and_wait)", "seq_router_append_ms"),
            ("per-message consume+ack msg/s", "iter_consume_msgs_s"),
        ):
            if any(key in systems.get(s, {}) for s in ("tamto_r3", "jetstream_r3")):
                out.append(row(label, key))
        trip = replication_round_trip_ms(doc, size)
        if not math.isnan(trip):
            out.append(["replication round trip ms", size, "", _fmt(trip), "", "", ""])
        keys = {
            k
            for s in ("tamto_r3", "jetstream_r3")
            for k in systems.get(s, {})
            if k.startswith("latency_")
        }
        for key in sorted(keys, key=lambda k: float(k.split("_", 1)[1])):
            rate = int(float(key.split("_", 1)[1]))
            for label, field in (("p50", "p50_ms"), ("p99", "p99_ms"), ("p99.9", "p999_ms")):
                cells = []
                for system in ("tamto", "tamto_r3", "jetstream_r3"):
                    summary = systems.get(system, {}).get(key, {})
                    cells.append((_num(summary.get(field)), bool(summary.get("saturated"))))
                (r1, _), (r3, r3_sat), (js, js_sat) = cells
                out.append(
                    [
                        f"latency {label} ms @ {rate:,}/s",
                        size,
                        _fmt(r1),
                        _fmt(r3) + (" (sat.)" if r3_sat else ""),
                        _fmt(_ratio(r3, r1), "x"),
                        _fmt(js) + (" (sat.)" if js_sat else ""),
                        _fmt(_ratio(r3, js), "x"),
                    ]
                )
    return out


CLUSTER_HEADERS = [
    "cluster",
    "size B",
    "Tamto R=1",
    "Tamto R=3",
    "R=3/R=1",
    "JetStream R3",
    "Tamto R=3/JS R3",
]


def _ephemeral_verdicts(doc: dict[str, Any], size: str, systems: dict[str, Any]) -> list[Verdict]:
    out: list[Verdict] = []
    if "ephemeral" not in systems:
        return out
    if int(size) in EPHEMERAL_RATIO_SIZES and "core_nats" in systems:
        ratio = _ratio(
            _get(doc, size, "ephemeral", "pubsub_msgs_s"),
            _get(doc, size, "core_nats", "pubsub_msgs_s"),
        )
        out.append(
            Verdict(
                "ephemeral pub→deliver ≥ 2x core NATS",
                int(size),
                ratio,
                EPHEMERAL_RATIO,
                ratio >= EPHEMERAL_RATIO,
            )
        )
    out += _request_reply_verdicts(doc, size, systems)
    latency = systems["ephemeral"].get(f"latency_{LATENCY_RATE:g}")
    if latency is not None:
        p99 = _num(latency["p99_ms"])
        out.append(
            Verdict(
                "ephemeral p99 ≤ 5 ms @ 5,000/s",
                int(size),
                p99,
                EPHEMERAL_P99_MS,
                p99 <= EPHEMERAL_P99_MS,
            )
        )
    return out


def _request_reply_verdicts(
    doc: dict[str, Any], size: str, systems: dict[str, Any]
) -> list[Verdict]:
    mine = systems["ephemeral"]
    out: list[Verdict] = []
    if "rr_pipelined_per_s" in mine and "core_nats" in systems:
        ratio = _ratio(
            _get(doc, size, "ephemeral", "rr_pipelined_per_s"),
            _get(doc, size, "core_nats", "rr_pipelined_per_s"),
        )
        target = "request/reply ≥ 0.5x core NATS (1 requester pipelining)"
        out.append(Verdict(target, int(size), ratio, RR_RATIO, ratio >= RR_RATIO))
    if "rr_serial_p50_ms" in mine:
        p50 = _num(mine["rr_serial_p50_ms"])
        target = "request/reply p50 ≤ 2 ms one at a time"
        out.append(Verdict(target, int(size), p50, RR_SERIAL_P50_MS, p50 <= RR_SERIAL_P50_MS))
    if "rr_crowd_p99_ms" in mine:
        p99 = _num(mine["rr_crowd_p99_ms"])
        target = "request/reply p99 ≤ 10 ms, 200 concurrent"
        out.append(Verdict(target, int(size), p99, RR_CROWD_P99_MS, p99 <= RR_CROWD_P99_MS))
    return out


def ephemeral_rows(doc: dict[str, Any]) -> list[list[str]]:
    """Ephemeral streams beside core NATS: metric, size, ephemeral, core NATS, ratio."""
    out: list[list[str]] = []
    for size, systems in doc["sizes"].items():
        if "ephemeral" not in systems:
            continue

        def pair(label: str, key: str, size: str = size) -> list[str]:
            mine = _get(doc, size, "ephemeral", key)
            theirs = _get(doc, size, "core_nats", key)
            return [label, size, _fmt(mine), _fmt(theirs), _fmt(_ratio(mine, theirs), "x")]

        out.append(pair("pub→deliver msg/s", "pubsub_msgs_s"))
        out.append(pair("pub→deliver MB/s", "pubsub_mb_s"))
        for key in sorted(
            (k for k in systems["ephemeral"] if k.startswith("latency_")),
            key=lambda k: float(k.split("_", 1)[1]),
        ):
            rate = int(float(key.split("_", 1)[1]))
            for label, field in (("p50", "p50_ms"), ("p99", "p99_ms")):
                mine = _num(systems["ephemeral"][key].get(field))
                theirs = _num(systems.get("core_nats", {}).get(key, {}).get(field))
                saturated = systems["ephemeral"][key].get("saturated")
                out.append(
                    [
                        f"latency {label} ms @ {rate:,}/s",
                        size,
                        _fmt(mine) + (" (sat.)" if saturated else ""),
                        _fmt(theirs),
                        _fmt(_ratio(mine, theirs), "x"),
                    ]
                )
        for key in sorted(k for k in systems["ephemeral"] if k.startswith("fanout_")):
            if key.endswith("_deliveries_s"):
                consumers = key.split("_")[1]
                out.append(pair(f"fan-out to {consumers}: deliveries/s", key))
        for key, what in (
            ("rr", "request/reply"),
            ("rr_pipelined", "request/reply, 1 requester x 64"),
            ("rr_serial", "request/reply one at a time"),
            ("rr_crowd", "request/reply, 200 concurrent"),
        ):
            if f"{key}_per_s" in systems["ephemeral"]:
                out.append(pair(f"{what} round trips/s", f"{key}_per_s"))
                out.append(pair(f"{what} p50 ms", f"{key}_p50_ms"))
                out.append(pair(f"{what} p99 ms", f"{key}_p99_ms"))
        if "ping_p50_ms" in systems["ephemeral"]:
            out.append(pair("one at a time p50 ms", "ping_p50_ms"))
            out.append(pair("one at a time p99 ms", "ping_p99_ms"))
    return out


EPHEMERAL_HEADERS = ["ephemeral", "size B", "Tamto ephemeral", "core NATS", "ratio"]
FUNCTION_HEADERS = ["processing function", "size B", "value"]


def function_rows(doc: dict[str, Any]) -> list[list[str]]:
    """The processing function rows (`tamto_bench.functions_jobs`): metric, size, value."""
    out: list[list[str]] = []
    for size, systems in doc["sizes"].items():
        found = systems.get("functions")
        if found is None:
            continue
        for label, key in (
            ("declarative filter+project msg/s", "filter_project_msgs_s"),
            ("declarative pass-through msg/s", "pass_through_msgs_s"),
            ("Python batch function msg/s", "python_batch_msgs_s"),
            ("Python batch overhead ms per 2,000", "python_batch_overhead_ms"),
        ):
            out.append([label, size, _fmt(_num(found.get(key)))])
    return out


#: The MQTT phases' metrics (`mqtt_bench`), as labelled in the table.
MQTT_METRICS = (
    ("QoS 0 pub→deliver msg/s", "mqtt_qos0_msgs_s"),
    ("QoS 1 publish msg/s (PUBACKs)", "mqtt_qos1_msgs_s"),
    ("QoS 1 latency p50 ms", "mqtt_latency_p50_ms"),
    ("QoS 1 latency p99 ms", "mqtt_latency_p99_ms"),
    ("fan-out deliveries/s", "mqtt_fanout_msgs_s"),
    ("idle connection KiB", "mqtt_idle_bytes_per_connection"),
)
MQTT_HEADERS = ["MQTT", "size B", "Tamto gateway", "mosquitto", "ratio"]


def mqtt_rows(doc: dict[str, Any]) -> list[list[str]]:
    """The gateway's MQTT broker beside mosquitto: metric, size, Tamto, mosquitto, ratio."""
    out: list[list[str]] = []
    for size, systems in doc["sizes"].items():
        for label, key in MQTT_METRICS:
            if key not in systems.get("tamto", {}):
                continue
            scale = 1 / 1024 if key.endswith("_bytes_per_connection") else 1
            mine = _get(doc, size, "tamto", key) * scale
            theirs = _get(doc, size, "mosquitto", key) * scale
            out.append([label, size, _fmt(mine), _fmt(theirs), _fmt(_ratio(mine, theirs), "x")])
    return out


def finish(doc: dict[str, Any]) -> dict[str, Any]:
    """Add the ratios and the target verdicts to a run's document."""
    doc["ratios"] = {size: ratios(doc, size) for size in doc["sizes"]}
    doc["targets"] = [asdict(v) for v in verdicts(doc)]
    doc["replication_round_trip_ms"] = {
        size: replication_round_trip_ms(doc, size)
        for size, systems in doc["sizes"].items()
        if "tamto_r3" in systems
    }
    return doc


def _is_ratio(target: str) -> bool:
    """Whether a target's bar is a ratio (e.g. "publish ≥ 10x JetStream")."""
    return "x JetStream" in target or "x core NATS" in target or "x R=1" in target


def _fmt(value: float, unit: str = "") -> str:
    if value is None or math.isnan(value):
        return "-"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "%":
        return f"{value * 100:.0f}%"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.2f}" if abs(value) < 100 else f"{value:.0f}"


def rows(doc: dict[str, Any]) -> list[list[str]]:
    """The summary as text rows: metric, size, Tamto, JetStream, ratio, core NATS, ceiling."""
    out: list[list[str]] = []
    for size in doc["sizes"]:
        r = ratios(doc, size)

        def g(system: str, key: str, size: str = size) -> float:
            return _get(doc, size, system, key)

        out.append(
            [
                "publish msg/s",
                size,
                _fmt(g("tamto", "publish_msgs_s")),
                _fmt(g("jetstream", "publish_msgs_s")),
                _fmt(r["publish_vs_jetstream"], "x"),
                _fmt(g("core_nats", "pubsub_msgs_s")),
                _fmt(g("ceiling", "msgs_s")),
            ]
        )
        out.append(
            [
                "publish MB/s",
                size,
                _fmt(g("tamto", "publish_mb_s")),
                _fmt(g("jetstream", "publish_mb_s")),
                "",
                _fmt(g("core_nats", "pubsub_mb_s")),
                _fmt(g("ceiling", "mb_s")),
            ]
        )
        if not math.isnan(g("tamto", "publish_batch_msgs_s")):
            out.append(
                [
                    "publish msg/s (send_batch)",
                    size,
                    _fmt(g("tamto", "publish_batch_msgs_s")),
                    "",
                    "",
                    "",
                    _fmt(g("ceiling", "msgs_s")),
                ]
            )
        for body, label in (("ndjson", "NDJSON"), ("arrow", "Arrow")):
            if not math.isnan(g("tamto", f"http_{body}_msgs_s")):
                out.append(
                    [
                        f"publish msg/s (HTTP, {label})",
                        size,
                        _fmt(g("tamto", f"http_{body}_msgs_s")),
                        "",
                        "",
                        "",
                        "",
                    ]
                )
        out.append(
            [
                "consume+ack msg/s",
                size,
                _fmt(g("tamto", "consume_msgs_s")),
                _fmt(g("jetstream", "consume_msgs_s")),
                _fmt(r["consume_vs_jetstream"], "x"),
                "",
                "",
            ]
        )
        out += _everyday_rows(doc, size)
        for key in sorted(
            {k for s in doc["sizes"][size].values() for k in s if k.startswith("latency_")},
            key=lambda k: float(k.split("_", 1)[1]),
        ):
            rate = key.split("_", 1)[1]
            for label, field in (("p50", "p50_ms"), ("p99", "p99_ms"), ("p99.9", "p999_ms")):
                saturated = {
                    system: bool(doc["sizes"][size].get(system, {}).get(key, {}).get("saturated"))
                    for system in ("tamto", "jetstream", "core_nats")
                }
                values = {
                    system: _num(doc["sizes"][size].get(system, {}).get(key, {}).get(field))
                    for system in ("tamto", "jetstream", "core_nats")
                }
                out.append(
                    [
                        f"latency {label} ms @ {int(float(rate)):,}/s",
                        size,
                        _fmt(values["tamto"]) + (" (sat.)" if saturated["tamto"] else ""),
                        _fmt(values["jetstream"]) + (" (sat.)" if saturated["jetstream"] else ""),
                        _fmt(_ratio(values["tamto"], values["jetstream"]), "x"),
                        _fmt(values["core_nats"]),
                        "",
                    ]
                )
            out += _publish_side_rows(doc["sizes"][size].get("tamto", {}).get(key, {}), size, rate)
    return out


def _publish_side_rows(summary: dict[str, Any], size: str, rate: str) -> list[list[str]]:
    """Where Tamto's publish→deliver time goes on the publish side (`runner.publish_side`):
    the publish→durable-ack p50, each hop's mean server time and the messages per storage
    append, when measured."""
    at = f"@ {int(float(rate)):,}/s"
    out: list[list[str]] = []
    if "publish_ack_p50_ms" in summary:
        ack = _fmt(_num(summary["publish_ack_p50_ms"]))
        out.append([f"  publish→ack p50 ms {at}", size, ack, "", "", "", ""])
    hops = summary.get("hops_ms") or {}
    if hops:
        names = "/".join(_HOP_NAMES.get(name, name) for name in hops)
        means = " / ".join(_fmt(_num(v)) for v in hops.values())
        out.append([f"  server ms {names} {at}", size, means, "", "", "", ""])
    if "messages_per_storage_append" in summary:
        per_append = _fmt(_num(summary["messages_per_storage_append"]))
        out.append([f"  msgs per storage append {at}", size, per_append, "", "", "", ""])
    return out


#: The short names of `runner.LATENCY_HOPS` in the breakdown row.
_HOP_NAMES = {
    "gateway_publish": "gateway",
    "router_append": "router",
    "router_publish": "router (direct)",
    "storage_append": "storage",
}


def _everyday_rows(doc: dict[str, Any], size: str) -> list[list[str]]:
    """The rows, where the run measured them (Tamto beside JetStream)."""
    out: list[list[str]] = []
    for label, key in (
        ("send_and_wait one at a time msg/s", "seq_publish_msgs_s"),
        ("send_and_wait p50 ms", "seq_p50_ms"),
        ("send_and_wait p99 ms", "seq_p99_ms"),
        ("per-message consume+ack msg/s", "iter_consume_msgs_s"),
    ):
        tamto, js = _get(doc, size, "tamto", key), _get(doc, size, "jetstream", key)
        if math.isnan(tamto) and math.isnan(js):
            continue
        out.append([label, size, _fmt(tamto), _fmt(js), _fmt(_ratio(tamto, js), "x"), "", ""])
    return out


HEADERS = ["metric", "size B", "Tamto", "JetStream", "Tamto/JS", "core NATS", "bare ceiling"]


def render(doc: dict[str, Any], console: Console) -> None:
    """Print the summary, the memory peaks and the target verdicts as rich tables."""
    table = Table(title="tamto bench", header_style="bold")
    for i, header in enumerate(HEADERS):
        table.add_column(header, justify="left" if i == 0 else "right")
    previous = None
    for row in rows(doc):
        if previous is not None and row[1] != previous:
            table.add_section()
        previous = row[1]
        table.add_row(*row)
    console.print(table)
    for title, headers, extra in (
        ("ephemeral streams", EPHEMERAL_HEADERS, ephemeral_rows(doc)),
        ("MQTT beside mosquitto", MQTT_HEADERS, mqtt_rows(doc)),
        ("processing functions, stream to stream", FUNCTION_HEADERS, function_rows(doc)),
        ("the cluster (R=3) beside one node", CLUSTER_HEADERS, cluster_rows(doc)),
    ):
        if not extra:
            continue
        extra_table = Table(title=title, header_style="bold")
        for i, header in enumerate(headers):
            extra_table.add_column(header, justify="left" if i == 0 else "right")
        for row in extra:
            extra_table.add_row(*row)
        console.print(extra_table)
    memory = Table(title="peak RSS (MiB)", header_style="bold")
    memory.add_column("system")
    memory.add_column("process")
    memory.add_column("peak", justify="right")
    for group, peaks in doc["memory_peak_rss_bytes"].items():
        for name, rss in sorted(peaks.items()):
            memory.add_row(group, name, f"{rss / 2**20:.0f}")
    console.print(memory)
    targets = Table(title="targets", header_style="bold")
    for header in ("target", "size B", "measured", "bar", ""):
        targets.add_column(header, justify="right" if header != "target" else "left")
    for v in verdicts(doc):
        unit = "%" if "ceiling" in v.target else "x" if _is_ratio(v.target) else ""
        targets.add_row(
            v.target,
            str(v.size),
            _fmt(v.value, unit),
            _fmt(v.bar, unit),
            "[green]met[/]" if v.met else "[red]missed[/]",
        )
    console.print(targets)
    for note in doc.get("notes", []):
        console.print(f"note: {note}")


def markdown(doc: dict[str, Any]) -> str:
    """The summary and the verdicts as Markdown tables (for docs/benchmarks.md)."""
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(row) + " |" for row in rows(doc)]
    eph = ephemeral_rows(doc)
    if eph:
        lines += ["", "| " + " | ".join(EPHEMERAL_HEADERS) + " |", "|" + "---|" * 5]
        lines += ["| " + " | ".join(row) + " |" for row in eph]
    mqtt = mqtt_rows(doc)
    if mqtt:
        lines += ["", "| " + " | ".join(MQTT_HEADERS) + " |", "|" + "---|" * 5]
        lines += ["| " + " | ".join(row) + " |" for row in mqtt]
    functions = function_rows(doc)
    if functions:
        lines += ["", "| " + " | ".join(FUNCTION_HEADERS) + " |", "|---|---|---|"]
        lines += ["| " + " | ".join(row) + " |" for row in functions]
    cluster = cluster_rows(doc)
    if cluster:
        lines += ["", "| " + " | ".join(CLUSTER_HEADERS) + " |", "|" + "---|" * 7]
        lines += ["| " + " | ".join(row) + " |" for row in cluster]
    lines += ["", "| target | size B | measured | bar | |", "|---|---|---|---|---|"]
    for v in verdicts(doc):
        unit = "%" if "ceiling" in v.target else "x" if _is_ratio(v.target) else ""
        lines.append(
            f"| {v.target} | {v.size} | {_fmt(v.value, unit)} | {_fmt(v.bar, unit)} | "
            f"{'met' if v.met else '**missed**'} |"
        )
    lines += ["", "| system | process | peak RSS MiB |", "|---|---|---|"]
    for group, peaks in doc["memory_peak_rss_bytes"].items():
        for name, rss in sorted(peaks.items()):
            lines.append(f"| {group} | {name} | {rss / 2**20:.0f} |")
    return "\n".join(lines) + "\n"
