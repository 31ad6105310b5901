"""A pipeline is one command, and the same script runs unchanged under spark-submit."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from tamto_protocol.batch import BatchColumns, encode_batch
from tamto_storage.model import StoredBatch
from tamto_storage.sealer import SealOptions
from tamto_storage.store import PartitionStore
from tamto_storage.wal import WalOptions

ROOT = Path(__file__).resolve().parents[2]
SPARK_SUBMIT = Path(sys.executable).with_name("spark-submit")
T_US = 1_800_000_000_000_000


async def make_data(data: Path) -> None:
    """A sealed stream `orders` with 2 partitions of 20 messages each, as storage writes it."""
    store = PartitionStore(data, WalOptions(), seal_options=SealOptions())
    try:
        for p in range(2):
            partition = await store.get("orders", p)
            await partition.open(1)
            arrow = encode_batch(
                BatchColumns(
                    payloads=[b"x" * 10] * 20,
                    keys=[f"k{i % 2}".encode() for i in range(20)],
                    headers=[None] * 20,
                    ids=[None] * 20,
                    event_times_us=[T_US - 1000] * 20,
                )
            )
            await partition.append(1, [StoredBatch(0, 20, T_US, arrow)])
    finally:
        await store.close()  # seals everything


def test_traffic_report_runs_under_spark_submit(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    asyncio.run(make_data(data))
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    done = subprocess.run(
        [
            str(SPARK_SUBMIT),
            "--master",
            "local[1]",
            "--conf",
            "spark.ui.enabled=false",
            str(ROOT / "pipelines" / "traffic_report.py"),
            "--data-dir",
            str(data),
            "--stream",
            "orders",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traffic of orders" in done.stdout
    lines = [line.split() for line in done.stdout.splitlines()]
    per_partition = {row[2]: row[3] for row in lines if len(row) == 5 and row[2] in {"0", "1"}}
    assert per_partition == {"0": "20", "1": "20"}, done.stdout
    assert (out / "traffic.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "per_minute").is_dir()
    assert (out / "latency").is_dir()
