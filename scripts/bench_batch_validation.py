"""Micro-benchmark of batch validation on the publish hot path (docs/validation.md).

Prints, for a few batch shapes, the cost of the schema-only decode, of
`check_buffers` (Arrow's full validation of every column) and of the whole
`validate_batch` that the gateway and storage run on every batch:

    .venv/bin/python scripts/bench_batch_validation.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tamto_protocol.batch import (
    BatchColumns,
    check_buffers,
    decode_batch,
    encode_batch,
    validate_batch,
)

SHAPES = [(1, 100, False), (100, 1024, False), (1000, 1024, True), (10000, 100, True)]
SHAPES += [(1000, 65536, False)]


def batch(messages: int, size: int, headers: bool) -> bytes:
    return encode_batch(
        BatchColumns(
            payloads=[b"x" * size] * messages,
            keys=[b"k%d" % i for i in range(messages)],
            headers=[{"a": "b"} if headers else None] * messages,
            ids=[f"p:{i}" for i in range(messages)],
            event_times_us=[None] * messages,
            producer="bench",
        )
    )


def best_us(run: Callable[[], object], repeats: int) -> float:
    """The best of 5 rounds of `repeats` calls, per call, in microseconds."""
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(repeats):
            run()
        best = min(best, (time.perf_counter() - started) / repeats)
    return best * 1e6


def measure(messages: int, size: int, headers: bool) -> str:
    data = batch(messages, size, headers)
    decoded = decode_batch(data)
    repeats = max(20, 2000 // max(1, messages // 100))
    decode = best_us(lambda: decode_batch(data), repeats)
    check = best_us(lambda: check_buffers(decoded), repeats)
    whole = best_us(lambda: validate_batch(data, messages, 0), repeats)
    return (
        f"{messages:6} x {size:6} B headers={headers!s:5} ipc={len(data) / 1024:9.1f} KiB"
        f"  decode {decode:8.1f} us  check_buffers {check:8.1f} us"
        f"  validate_batch {whole:8.1f} us"
    )


def main() -> None:
    for shape in SHAPES:
        print(measure(*shape))


if __name__ == "__main__":
    main()
