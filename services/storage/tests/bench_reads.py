"""Micro-benchmark: sequential 8 MiB reads of a partition, from the WAL and from segments.

Not collected by pytest (no ``test_`` prefix). Builds one partition per
message size in a temporary directory through storage's own Python API
(`Partition.load`, `append`, `seal`, `trim_wal`, `read`), then reads everything
from offset 0 on with the storage service's read size (8 MiB), the way the
router walks a backlog: first while it is still in the WAL, then once sealed.

``--compare REF`` runs the same measurement twice, in two child processes:
once with ``tamto_storage`` as of the git revision REF (exported read-only with
``git archive``) and once with the working tree, and prints the ratios. Each
version seals its own segments, so a "before" run also reads the row groups
the old writer made.

    .venv/bin/python services/storage/tests/bench_reads.py --compare HEAD
    .venv/bin/python services/storage/tests/bench_reads.py --messages-10k 100000 \
        --messages-100 1000000

Payloads are random by default (zstd cannot shrink them); ``--payload
repeated`` uses one payload for every message like ``./dev bench`` does.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from tamto_testing.grpc_servers import listen

READ_BYTES = 8 * 1024 * 1024  # storage's --read-max-bytes default
SEGMENT_BYTES = 64 * 1024 * 1024  # storage's --segment-bytes default
BATCH_BYTES = 4 * 1024 * 1024  # the SDK producer's batch cap
BATCH_MESSAGES = 1000  # and its message cap at small sizes
REPO = Path(__file__).resolve().parents[3]
STREAM = "bench"


@dataclass(frozen=True)
class Case:
    size: int
    messages: int

    @property
    def per_batch(self) -> int:
        return max(1, min(BATCH_MESSAGES, BATCH_BYTES // self.size))


def make_batches(case: Case, payload: str, seed: int = 7) -> list[bytes]:
    """Arrow IPC batches as the SDK producer sends them (ids, producer name)."""
    from tamto_protocol.batch import PAYLOAD_TYPE, encode_record_batch, make_batch, sequence_ids

    rng = np.random.default_rng(seed)
    fixed = rng.bytes(case.size)
    out = []
    for first in range(0, case.messages, case.per_batch):
        n = min(case.per_batch, case.messages - first)
        data = fixed * n if payload == "repeated" else rng.bytes(n * case.size)
        offsets = pa.py_buffer(np.arange(0, (n + 1) * case.size, case.size, dtype=np.int32))
        payloads = pa.Array.from_buffers(PAYLOAD_TYPE, n, [None, offsets, pa.py_buffer(data)])
        ids = sequence_ids("bench-producer", first, n)
        out.append(encode_record_batch(make_batch(payloads, ids=ids, producer="bench")))
    return out


async def read_everything(partition: object, end: int) -> tuple[float, int, int]:
    """Seconds, reads and body bytes to read offsets 0..end sequentially."""
    offset = reads = size = 0
    started = time.perf_counter()
    while offset < end:
        result = await partition.read(offset, 0, READ_BYTES)  # type: ignore[attr-defined]
        reads += 1
        size += sum(len(b.arrow_ipc) for b in result.batches)
        offset = result.next_offset
    return time.perf_counter() - started, reads, size


async def read_everything_rpc(port: int, end: int) -> tuple[float, int, int]:
    """The same through the Read RPC from this process, parsed like the router does."""
    import grpc

    from tamto_common.channels import CHANNEL_OPTIONS
    from tamto_protocol.v1 import storage_pb2, storage_pb2_grpc

    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS) as ch:
        stub = storage_pb2_grpc.StorageStub(ch)
        ref = storage_pb2.PartitionRef(stream=STREAM, partition=0)
        offset = reads = size = 0
        started = time.perf_counter()
        while offset < end:
            r = await stub.Read(storage_pb2.ReadRequest(partition=ref, from_offset=offset))
            reads += 1
            size += sum(len(b.arrow_ipc) for b in r.batches)  # one copy each, as the router
            offset = r.next_offset
        return time.perf_counter() - started, reads, size


async def serve(data_dir: Path) -> None:
    """Serve `data_dir` over gRPC as the storage service does; print the port; run forever."""
    import grpc

    from tamto_common.channels import CHANNEL_OPTIONS
    from tamto_common.grpc_errors import TranslateErrorsInterceptor
    from tamto_protocol.v1 import storage_pb2_grpc
    from tamto_storage import grpc_api
    from tamto_storage.store import PartitionStore
    from tamto_storage.wal import WalOptions

    server = grpc.aio.server(interceptors=[TranslateErrorsInterceptor()], options=CHANNEL_OPTIONS)
    servicer = grpc_api.StorageServicer(PartitionStore(data_dir, WalOptions()), READ_BYTES)
    register = getattr(grpc_api, "serve", None)  # older versions only had the generated one
    if register is not None:
        register(servicer, server)
    else:
        storage_pb2_grpc.add_StorageServicer_to_server(servicer, server)
    port = listen(server)
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


async def over_rpc(data_dir: Path, end: int) -> tuple[float, int, int]:
    """Start a storage server process on `data_dir`, read everything twice, keep the second."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--serve", str(data_dir), stdout=asyncio.subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        port = int(await child.stdout.readline())
        await read_everything_rpc(port, end)  # load the partition, warm up
        return await read_everything_rpc(port, end)
    finally:
        child.kill()  # no clean shutdown: that would seal the WAL
        await child.wait()


async def load_partition(pid: Any, root: Path) -> Any:
    """The partition as a storage node opens it: with the default decoded-group
    cache where this version takes one (`--compare` may run an older one)."""
    from tamto_storage.config import StorageConfig
    from tamto_storage.partition import Partition
    from tamto_storage.wal import WalOptions

    if "decoded_groups" not in inspect.signature(Partition.load).parameters:
        return await Partition.load(pid, root, WalOptions())
    cache = StorageConfig().decoded_groups()
    return await Partition.load(pid, root, WalOptions(), decoded_groups=cache)


async def measure(case: Case, payload: str, data_dir: Path) -> dict[str, float]:
    from tamto_storage.model import PartitionId, StoredBatch
    from tamto_storage.store import partition_dir

    pid = PartitionId(STREAM, 0)
    root = partition_dir(data_dir, pid)
    bodies = make_batches(case, payload)
    partition = await load_partition(pid, root)
    await partition.open(1)
    base = 0
    for i in range(0, len(bodies), 8):  # a few batches per append, like the router
        chunk = []
        for body in bodies[i : i + 8]:
            n = min(case.per_batch, case.messages - base)
            chunk.append(StoredBatch(base, n, 1_700_000_000_000_000 + base, body))
            base += n
        await partition.append(1, chunk)
    del bodies
    end = partition.offsets().next_offset
    await read_everything(partition, end)  # warm the page cache and imports
    wal_s, wal_reads, wal_bytes = await read_everything(partition, end)
    await partition.close()
    wal_rpc_s, _, _ = await over_rpc(data_dir, end)

    partition = await load_partition(pid, root)
    started = time.perf_counter()
    await partition.seal(SEGMENT_BYTES)
    seal_s = time.perf_counter() - started
    await partition.trim_wal()
    await read_everything(partition, end)
    seg_s, seg_reads, seg_bytes = await read_everything(partition, end)
    await partition.close()
    seg_rpc_s, _, _ = await over_rpc(data_dir, end)
    disk = sum(p.stat().st_size for p in root.glob("segment-*.parquet"))
    return {
        "wal_s": wal_s,
        "wal_rpc_s": wal_rpc_s,
        "wal_reads": wal_reads,
        "wal_MBps": wal_bytes / wal_s / 1e6,
        "wal_rpc_MBps": wal_bytes / wal_rpc_s / 1e6,
        "seal_s": seal_s,
        "segment_s": seg_s,
        "segment_rpc_s": seg_rpc_s,
        "segment_reads": seg_reads,
        "segment_MBps": seg_bytes / seg_s / 1e6,
        "segment_rpc_MBps": seg_bytes / seg_rpc_s / 1e6,
        "segment_disk_MB": disk / 1e6,
    }


def run_here(cases: list[Case], payload: str) -> dict[str, dict[str, float]]:
    results = {}
    for case in cases:
        with tempfile.TemporaryDirectory(prefix="tamto-bench-reads-") as tmp:
            results[str(case.size)] = asyncio.run(measure(case, payload, Path(tmp)))
    return results


def export_storage(ref: str, into: Path) -> Path:
    """``services/storage/src`` as of git `ref`, unpacked read-only under `into`."""
    archive = subprocess.run(
        ["git", "archive", ref, "services/storage/src"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "services" / "storage" / "src"


def run_child(argv: list[str], source: Path | None) -> dict[str, dict[str, float]]:
    env = dict(os.environ)
    if source is not None:  # shadow the workspace's tamto_storage with the exported one
        env["PYTHONPATH"] = os.pathsep.join([str(source), env.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, __file__, *argv, "--json"], env=env, check=True, capture_output=True
    )
    result: dict[str, dict[str, float]] = json.loads(out.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages-10k", type=int, default=30_000)
    parser.add_argument("--messages-100", type=int, default=300_000)
    parser.add_argument("--payload", choices=("random", "repeated"), default="random")
    parser.add_argument("--compare", metavar="REF", help="also run tamto_storage of REF")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve))
        return
    cases = [Case(10 * 1024, args.messages_10k), Case(100, args.messages_100)]
    cases = [c for c in cases if c.messages]  # 0 skips a size
    if args.json:
        import tamto_storage

        print(f"tamto_storage from {tamto_storage.__file__}", file=sys.stderr)
        print(json.dumps(run_here(cases, args.payload)))
        return
    argv = [
        f"--messages-10k={args.messages_10k}",
        f"--messages-100={args.messages_100}",
        f"--payload={args.payload}",
    ]
    runs: dict[str, dict[str, dict[str, float]]] = {}
    if args.compare:
        with tempfile.TemporaryDirectory(prefix="tamto-bench-src-") as tmp:
            runs[args.compare] = run_child(argv, export_storage(args.compare, Path(tmp)))
    runs["working tree"] = run_child(argv, None)
    for name, result in runs.items():
        print(f"== {name} ({args.payload} payloads)")
        for size, row in result.items():
            cells = ", ".join(f"{k}={v:.3g}" for k, v in row.items())
            print(f"  {size:>5} B: {cells}")
    if args.compare:
        before, after = runs[args.compare], runs["working tree"]
        print(f"== speed-up, working tree vs {args.compare} (higher is better)")
        for size in after:
            b, a = before[size], after[size]
            print(
                f"  {size:>5} B: WAL reads {b['wal_s'] / a['wal_s']:.2f}x "
                f"(RPC {b['wal_rpc_s'] / a['wal_rpc_s']:.2f}x), "
                f"segment reads {b['segment_s'] / a['segment_s']:.2f}x "
                f"(RPC {b['segment_rpc_s'] / a['segment_rpc_s']:.2f}x), "
                f"seal {b['seal_s'] / a['seal_s']:.2f}x"
            )


if __name__ == "__main__":
    main()
