"""`--seal-age-ms` reaches every Tamto a run starts, not only the freshness rows'
(a unit test of `tamto_bench.runner.systems`: `local_tamto` replaced by a recorder,
so what the run would start each Tamto with is seen without starting one)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tamto_bench.harness import RssSampler, TamtoTarget
from tamto_bench.runner import systems
from tamto_bench.runner.options import BenchOptions


async def started_with(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, seal_age_ms: int
) -> tuple[list[dict[str, Any]], list[str]]:
    """The keyword arguments `_Starter.tamto` starts a local Tamto with, and its notes."""
    calls: list[dict[str, Any]] = []

    @contextlib.asynccontextmanager
    async def recorder(data_dir: Path, **kwargs: Any) -> AsyncIterator[TamtoTarget]:
        calls.append(kwargs)
        yield TamtoTarget("tamto://127.0.0.1:1", "key", "127.0.0.1:1")

    async def no_pids(etcd: str) -> dict[str, int]:
        raise OSError("no etcd here")

    monkeypatch.setattr(systems, "local_tamto", recorder)
    monkeypatch.setattr(systems, "service_pids", no_pids)
    options = BenchOptions(seal_age_ms=seal_age_ms)
    async with contextlib.AsyncExitStack() as stack:
        starter = systems._Starter(stack, options, tmp_path, RssSampler(), True, None)
        await starter.tamto("tamto", 1)
    return calls, starter.found.notes


async def test_the_seal_age_is_every_local_tamtos_storage_setting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls, notes = await started_with(monkeypatch, tmp_path, 300)
    assert [c["env"] for c in calls] == [{"TAMTO_STORAGE_SEAL_AGE_MS": "300"}]
    assert "tamto: storage's seal age 300 ms (--seal-age-ms)" in notes


async def test_without_it_storage_keeps_its_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls, notes = await started_with(monkeypatch, tmp_path, 0)
    assert [c["env"] for c in calls] == [{}]
    assert not [n for n in notes if "seal age" in n]
