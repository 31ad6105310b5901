"""The MQTT phases of `tamto bench`: the table beside mosquitto (a pure function of the
JSON document), and the benchmark's own client against a real mosquitto."""

from __future__ import annotations

import shutil
from pathlib import Path

from tamto_bench import mqtt_bench
from tamto_bench.report import markdown, mqtt_rows
from tamto_testing.needs import needs


def test_mqtt_rows_put_the_gateway_beside_mosquitto() -> None:
    doc = {
        "sizes": {
            "100": {
                "tamto": {"mqtt_qos1_msgs_s": 5_000.0, "mqtt_idle_bytes_per_connection": 16_384},
                "mosquitto": {"mqtt_qos1_msgs_s": 50_000.0, "mqtt_idle_bytes_per_connection": 1024},
            },
            "1024": {"tamto": {"publish_msgs_s": 1.0}},  # no MQTT phase at this size
        },
        "memory_peak_rss_bytes": {},
    }
    assert mqtt_rows(doc) == [
        ["QoS 1 publish msg/s (PUBACKs)", "100", "5,000", "50,000", "0.10x"],
        ["idle connection KiB", "100", "16.00", "1.00", "16.00x"],
    ]
    assert "| MQTT | size B | Tamto gateway | mosquitto | ratio |" in markdown(doc)


HAS_MOSQUITTO = shutil.which("mosquitto") is not None or Path("/usr/sbin/mosquitto").exists()


@needs(
    None if HAS_MOSQUITTO else "mosquitto missing (Debian package mosquitto; .ci/run installs it)"
)
async def test_the_bench_client_measures_mosquitto(tmp_path: Path) -> None:
    async with mqtt_bench.mosquitto_server(tmp_path) as broker:
        values = await mqtt_bench.measure(broker, "bench", 100, 0.5)
        per_connection = await mqtt_bench.idle_memory(broker, 50)
    assert values["mqtt_qos0_msgs_s"] > 0
    assert values["mqtt_qos1_msgs_s"] > 0
    assert 0 < values["mqtt_latency_p50_ms"] <= values["mqtt_latency_p99_ms"]
    assert values["mqtt_fanout_msgs_s"] > 0
    assert per_connection >= 0
