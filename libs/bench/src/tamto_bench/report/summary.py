"""The summary table: Tamto beside JetStream, core NATS and the bare ceiling, metric
by metric and size by size (publish, consume, the everyday calls, latency at each rate
with where the publish side's time goes)."""

from __future__ import annotations

import math
from typing import Any

from tamto_bench.report.values import fmt, get, latency_keys, num, ratio_of
from tamto_bench.report.verdicts import ratios

HEADERS = ["metric", "size B", "Tamto", "JetStream", "Tamto/JS", "core NATS", "bare ceiling"]

#: The short names of `runner.LATENCY_HOPS` in the breakdown row.
_HOP_NAMES = {
    "gateway_publish": "gateway",
    "router_append": "router",
    "router_publish": "router (direct)",
    "storage_append": "storage",
}


def rows(doc: dict[str, Any]) -> list[list[str]]:
    """The summary as text rows: metric, size, Tamto, JetStream, ratio, core NATS, ceiling."""
    out: list[list[str]] = []
    for size in doc["sizes"]:
        out += _publish_rows(doc, size)
        out += _everyday_rows(doc, size)
        out += _latency_rows(doc, size)
    return out


def _publish_rows(doc: dict[str, Any], size: str) -> list[list[str]]:
    """Publish (per message, `send_batch`, over HTTP) and consume+ack."""
    r = ratios(doc, size)

    def g(system: str, key: str) -> float:
        return get(doc, size, system, key)

    out = [
        [
            "publish msg/s",
            size,
            fmt(g("tamto", "publish_msgs_s")),
            fmt(g("jetstream", "publish_msgs_s")),
            fmt(r["publish_vs_jetstream"], "x"),
            fmt(g("core_nats", "pubsub_msgs_s")),
            fmt(g("ceiling", "msgs_s")),
        ],
        [
            "publish MB/s",
            size,
            fmt(g("tamto", "publish_mb_s")),
            fmt(g("jetstream", "publish_mb_s")),
            "",
            fmt(g("core_nats", "pubsub_mb_s")),
            fmt(g("ceiling", "mb_s")),
        ],
    ]
    batched = g("tamto", "publish_batch_msgs_s")
    if not math.isnan(batched):
        ceiling = fmt(g("ceiling", "msgs_s"))
        out.append(["publish msg/s (send_batch)", size, fmt(batched), "", "", "", ceiling])
    for body, label in (("ndjson", "NDJSON"), ("arrow", "Arrow")):
        rate = g("tamto", f"http_{body}_msgs_s")
        if not math.isnan(rate):
            out.append([f"publish msg/s (HTTP, {label})", size, fmt(rate), "", "", "", ""])
    consume = (g("tamto", "consume_msgs_s"), g("jetstream", "consume_msgs_s"))
    ratio_text = fmt(r["consume_vs_jetstream"], "x")
    out.append(["consume+ack msg/s", size, *map(fmt, consume), ratio_text, "", ""])
    return out


def _everyday_rows(doc: dict[str, Any], size: str) -> list[list[str]]:
    """The rows, where the run measured them (Tamto beside JetStream)."""
    out: list[list[str]] = []
    for label, key in (
        ("send_and_wait one at a time msg/s", "seq_publish_msgs_s"),
        ("send_and_wait p50 ms", "seq_p50_ms"),
        ("send_and_wait p99 ms", "seq_p99_ms"),
        ("per-message consume+ack msg/s", "iter_consume_msgs_s"),
    ):
        tamto, js = get(doc, size, "tamto", key), get(doc, size, "jetstream", key)
        if math.isnan(tamto) and math.isnan(js):
            continue
        out.append([label, size, fmt(tamto), fmt(js), fmt(ratio_of(tamto, js), "x"), "", ""])
    return out


def _latency_rows(doc: dict[str, Any], size: str) -> list[list[str]]:
    """p50, p99 and p99.9 at each rate measured, each followed by Tamto's publish side."""
    at_size = doc["sizes"][size]
    out: list[list[str]] = []
    for key in latency_keys(k for s in at_size.values() for k in s):
        rate = key.split("_", 1)[1]
        for label, field in (("p50", "p50_ms"), ("p99", "p99_ms"), ("p99.9", "p999_ms")):
            summaries = {
                system: at_size.get(system, {}).get(key, {})
                for system in ("tamto", "jetstream", "core_nats")
            }
            values = {system: num(s.get(field)) for system, s in summaries.items()}
            sat = {
                system: " (sat.)" if s.get("saturated") else "" for system, s in summaries.items()
            }
            out.append(
                [
                    f"latency {label} ms @ {int(float(rate)):,}/s",
                    size,
                    fmt(values["tamto"]) + sat["tamto"],
                    fmt(values["jetstream"]) + sat["jetstream"],
                    fmt(ratio_of(values["tamto"], values["jetstream"]), "x"),
                    fmt(values["core_nats"]),
                    "",
                ]
            )
        out += _publish_side_rows(at_size.get("tamto", {}).get(key, {}), size, rate)
    return out


def _publish_side_rows(summary: dict[str, Any], size: str, rate: str) -> list[list[str]]:
    """Where Tamto's publish→deliver time goes (`runner.publish_side`): the
    publish→durable-ack p50, each hop's mean server time and the messages per storage
    append, and the deliver side (router sequenced → delivered) p50 / p99, when measured."""
    at = f"@ {int(float(rate)):,}/s"
    out: list[list[str]] = []
    if "publish_ack_p50_ms" in summary:
        ack = fmt(num(summary["publish_ack_p50_ms"]))
        out.append([f"  publish→ack p50 ms {at}", size, ack, "", "", "", ""])
    if "deliver_side_p50_ms" in summary:
        side = " / ".join(fmt(num(summary.get(f"deliver_side_{q}_ms"))) for q in ("p50", "p99"))
        out.append([f"  sequenced→deliver p50 / p99 ms {at}", size, side, "", "", "", ""])
    hops = summary.get("hops_ms") or {}
    if hops:
        names = "/".join(_HOP_NAMES.get(name, name) for name in hops)
        means = " / ".join(fmt(num(v)) for v in hops.values())
        out.append([f"  server ms {names} {at}", size, means, "", "", "", ""])
    if "messages_per_storage_append" in summary:
        per_append = fmt(num(summary["messages_per_storage_append"]))
        out.append([f"  msgs per storage append {at}", size, per_append, "", "", "", ""])
    return out
