"""A new test cluster forgets the members an earlier test's killed processes left in
the shared etcd, and keeps the living ones."""

from __future__ import annotations

import os
import subprocess
import sys

import aetcd

from tamto_common.membership import Member, list_members
from tamto_testing.cluster import forget_the_dead, process_alive


def member(instance_id: str, pid: int) -> Member:
    return Member("storage", instance_id, "127.0.0.1:1", "127.0.0.1:2", "0", pid, 0.0)


def exited_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_reaped_process_is_not_alive_and_this_one_is() -> None:
    assert process_alive(os.getpid())
    assert not process_alive(exited_pid())


async def test_members_of_dead_processes_are_deleted_and_living_ones_kept(
    etcd_endpoint: str, etcd_client: aetcd.Client
) -> None:
    dead, living = member("forget-dead", exited_pid()), member("forget-living", os.getpid())
    for m in (dead, living):
        await etcd_client.put(m.key.encode(), m.to_json())
    try:
        forget_the_dead(etcd_endpoint)
        ids = {m.instance_id for m in await list_members(etcd_client, "storage")}
        assert "forget-dead" not in ids
        assert "forget-living" in ids
    finally:
        await etcd_client.delete(living.key.encode())
