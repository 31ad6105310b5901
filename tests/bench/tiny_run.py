"""The smallest benchmark run the bench tests make: one size, short windows, one rate."""

from __future__ import annotations

TINY_RUN = (
    "--quick",
    "--sizes",
    "100",
    "--duration",
    "0.5",
    "--rates",
    "500",
    "--producers",
    "1",
    "--consumers",
    "1",
    "--partitions",
    "2",
)
