"""The tables beside the summary: ephemeral streams beside core NATS, the gateway's
MQTT broker beside mosquitto, the processing functions, and the cluster (R=3) beside
one node. Each is a header and text rows."""

from __future__ import annotations

import math
from typing import Any

from tamto_bench.report.values import fmt, get, latency_keys, num, ratio_of
from tamto_bench.report.verdicts import replication_round_trip_ms


def ephemeral_rows(doc: dict[str, Any]) -> list[list[str]]:
    """Ephemeral streams beside core NATS: metric, size, ephemeral, core NATS, ratio."""
    out: list[list[str]] = []
    for size, systems in doc["sizes"].items():
        if "ephemeral" not in systems:
            continue

        def pair(label: str, key: str, size: str = size) -> list[str]:
            mine = get(doc, size, "ephemeral", key)
            theirs = get(doc, size, "core_nats", key)
            return [label, size, fmt(mine), fmt(theirs), fmt(ratio_of(mine, theirs), "x")]

        out.append(pair("pub→deliver msg/s", "pubsub_msgs_s"))
        out.append(pair("pub→deliver MB/s", "pubsub_mb_s"))
        for key in latency_keys(systems["ephemeral"]):
            rate = int(float(key.split("_", 1)[1]))
            for label, field in (("p50", "p50_ms"), ("p99", "p99_ms")):
                mine = num(systems["ephemeral"][key].get(field))
                theirs = num(systems.get("core_nats", {}).get(key, {}).get(field))
                saturated = systems["ephemeral"][key].get("saturated")
                out.append(
                    [
                        f"latency {label} ms @ {rate:,}/s",
                        size,
                        fmt(mine) + (" (sat.)" if saturated else ""),
                        fmt(theirs),
                        fmt(ratio_of(mine, theirs), "x"),
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
            out.append([label, size, fmt(num(found.get(key)))])
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
            mine = get(doc, size, "tamto", key) * scale
            theirs = get(doc, size, "mosquitto", key) * scale
            out.append([label, size, fmt(mine), fmt(theirs), fmt(ratio_of(mine, theirs), "x")])
    return out


def cluster_rows(doc: dict[str, Any]) -> list[list[str]]:
    """The cluster beside one node: metric, size, Tamto R=1, Tamto R=3, R=3/R=1,
    JetStream R3, Tamto R=3/JetStream R3."""
    out: list[list[str]] = []
    for size, systems in doc["sizes"].items():
        if "tamto_r3" not in systems and "jetstream_r3" not in systems:
            continue

        def row(label: str, key: str, size: str = size) -> list[str]:
            r1, r3 = get(doc, size, "tamto", key), get(doc, size, "tamto_r3", key)
            js = get(doc, size, "jetstream_r3", key)
            return [
                label,
                size,
                fmt(r1),
                fmt(r3),
                fmt(ratio_of(r3, r1), "x"),
                fmt(js),
                fmt(ratio_of(r3, js), "x"),
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
            out.append(["replication round trip ms", size, "", fmt(trip), "", "", ""])
        keys = latency_keys(k for s in ("tamto_r3", "jetstream_r3") for k in systems.get(s, {}))
        for key in keys:
            rate = int(float(key.split("_", 1)[1]))
            for label, field in (("p50", "p50_ms"), ("p99", "p99_ms"), ("p99.9", "p999_ms")):
                cells = []
                for system in ("tamto", "tamto_r3", "jetstream_r3"):
                    summary = systems.get(system, {}).get(key, {})
                    cells.append((num(summary.get(field)), bool(summary.get("saturated"))))
                (r1, _), (r3, r3_sat), (js, js_sat) = cells
                out.append(
                    [
                        f"latency {label} ms @ {rate:,}/s",
                        size,
                        fmt(r1),
                        fmt(r3) + (" (sat.)" if r3_sat else ""),
                        fmt(ratio_of(r3, r1), "x"),
                        fmt(js) + (" (sat.)" if js_sat else ""),
                        fmt(ratio_of(r3, js), "x"),
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


#: The freshness rows' readers (`tamto_bench.runner.freshness`): (store, reader, label).
FRESHNESS_READERS = (
    ("dir", "store", "directory store (manifest)"),
    ("dir", "iceberg", "Iceberg snapshot (directory store)"),
    ("s3", "store", "S3 store on SeaweedFS (manifest)"),
    ("s3", "iceberg", "Iceberg snapshot (S3 store)"),
)
FRESHNESS_HEADERS = [
    "freshness (ack to visible)",
    "size B",
    "load msg/s",
    "p50 s",
    "p99 s",
    "max s",
    "probes (unseen)",
    "storage cores",
]


def freshness_rows(doc: dict[str, Any]) -> list[list[str]]:
    """Ack to visible per reader, at rest and under load: p50/p99/max seconds."""
    out: list[list[str]] = []
    for size, systems in doc["sizes"].items():
        found = systems.get("freshness", {})
        for store, reader, label in FRESHNESS_READERS:
            for state in ("rest", "load"):
                window = found.get(store, {}).get(state)
                if window is None:
                    continue
                seen = window[reader]
                out.append(
                    [
                        f"{label}, {'at rest' if state == 'rest' else 'under load'}",
                        size,
                        fmt(num(window.get("load_msgs_s"))),
                        fmt(num(seen.get("p50_s"))),
                        fmt(num(seen.get("p99_s"))),
                        fmt(num(seen.get("max_s"))),
                        f"{seen.get('probes', 0)} ({seen.get('unseen', 0)})",
                        fmt(num(window.get("storage_cpu_per_s"))),
                    ]
                )
    return out
