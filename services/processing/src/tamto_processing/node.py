"""A processing node's supervisor: run exactly the instances the ring places here.

Every `assign_interval_s` it reads the processing members and the function specs
from etcd, computes its share (`tamto_processing.placement`), starts the instances
it should run and lacks, and stops those it runs and should not (moved to another
node, paused, deleted, or replaced by a new version of their spec: an update rolls
instance by instance as each node sees it). An instance that fails is restarted
after a backoff, its error kept in its status. Every instance writes its status
(node, counters, last error) to etcd, where `describe` and `status` read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

import aetcd
import structlog
from tamto_functions.model import FunctionSpec
from tamto_functions.specs import STATE_PREFIX, SpecStore

import tamto_sdk
from tamto_common.membership import list_members
from tamto_processing.config import ProcessingConfig
from tamto_processing.placement import assigned
from tamto_processing.runner import Instance

log = structlog.get_logger("tamto.processing")

#: The longest wait before restarting a failing instance.
MAX_BACKOFF_S = 30.0


@dataclass(slots=True)
class Running:
    """An instance this node runs: its task, the spec version it runs, what it reports."""

    spec: FunctionSpec
    task: asyncio.Task[None]
    instance: Instance | None = None
    error: str = ""
    restarts: int = 0


class Supervisor:
    """Keeps this node's instances in line with the specs and the ring."""

    def __init__(self, config: ProcessingConfig, etcd: aetcd.Client) -> None:
        self._config = config
        self._etcd = etcd
        self._store = SpecStore(etcd)
        self._me = config.member_id
        self._running: dict[str, Running] = {}

    async def run(self) -> None:
        while True:
            try:
                await self.reconcile()
                await self._report()
            except Exception as exc:  # etcd away for a moment: keep what runs, try again
                log.warning("cannot reconcile functions", error=str(exc))
            await asyncio.sleep(self._config.assign_interval_s)

    async def reconcile(self) -> None:
        members = await list_members(self._etcd, "processing")
        nodes = [m.instance_id for m in members] or [self._me]
        wanted = assigned(await self._store.all(), nodes, self._me)
        for instance_id, running in list(self._running.items()):
            spec = wanted.get(instance_id)
            if spec is None or spec.version != running.spec.version:
                await self._stop(instance_id)
        for instance_id, spec in wanted.items():
            if instance_id not in self._running:
                self._start(instance_id, spec)

    def _start(self, instance_id: str, spec: FunctionSpec) -> None:
        running = Running(spec, asyncio.create_task(asyncio.sleep(0)))
        running.task = asyncio.create_task(
            self._keep_running(instance_id, running), name=instance_id
        )
        self._running[instance_id] = running
        log.info("function instance started", instance=instance_id, version=spec.version)

    async def _stop(self, instance_id: str) -> None:
        running = self._running.pop(instance_id)
        running.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await running.task
        with contextlib.suppress(Exception):
            await self._store.delete_status(running.spec.name, instance_id)
        log.info("function instance stopped", instance=instance_id)

    async def stop_all(self) -> None:
        for instance_id in list(self._running):
            await self._stop(instance_id)

    async def _keep_running(self, instance_id: str, running: Running) -> None:
        backoff = self._config.restart_backoff_s
        while True:
            try:
                await self._run_once(instance_id, running)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # its own failure: reported, retried, never the node's
                running.error = f"{type(exc).__name__}: {exc}"[:500]
                running.restarts += 1
                log.warning("function instance failed", instance=instance_id, error=running.error)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def _run_once(self, instance_id: str, running: Running) -> None:
        spec = running.spec
        api_key = await self._store.api_key(spec.name)
        if api_key is None:
            raise RuntimeError(f"no credential stored for function {spec.name!r}")
        state_key = f"{STATE_PREFIX}{spec.name}/{instance_id}".encode()
        stored = await self._etcd.get(state_key)

        async def save_state(data: bytes) -> None:
            await self._etcd.put(state_key, data)

        url, options = await self._gateway_url(), self._client_options()
        async with tamto_sdk.connect(url, api_key=api_key, options=options) as client:
            instance = Instance(
                spec, instance_id, client, stored.value if stored else None, save_state
            )
            running.instance = instance
            await instance.run()

    def _client_options(self) -> tamto_sdk.ClientOptions:
        """With TLS on, the node dials the gateway with its own certificate and CA."""
        tls = self._config.tls()
        if tls is None:
            return tamto_sdk.ClientOptions()
        return tamto_sdk.ClientOptions(
            tls=True,
            root_certificates=tls.ca,
            certificate_chain=tls.cert_chain,
            private_key=tls.private_key,
        )

    async def _gateway_url(self) -> str:
        if self._config.gateway_url:
            return self._config.gateway_url
        gateways = await list_members(self._etcd, "gateway")
        if not gateways:
            raise RuntimeError("no gateway is registered")
        ring_choice = sorted(gateways, key=lambda m: hash((m.instance_id, self._me)))[0]
        return f"tamto://{ring_choice.address}"

    async def _report(self) -> None:
        for instance_id, running in self._running.items():
            await self._store.put_status(running.spec.name, instance_id, self._status(running))

    def _status(self, running: Running) -> dict[str, Any]:
        status: dict[str, Any] = {
            "node": self._me,
            "version": running.spec.version,
            "restarts": running.restarts,
            "last_error": running.error,
            "updated_at": time.time(),
        }
        if running.instance is not None:
            counters = running.instance.counters
            status.update(
                processed=counters.processed,
                published=counters.published,
                errors=counters.errors,
                last_error=counters.last_error or running.error,
                started_at=counters.started_at,
            )
        return status
