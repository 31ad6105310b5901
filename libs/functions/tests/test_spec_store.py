"""SpecStore on a real etcd: deleting a function removes everything kept for it."""

from __future__ import annotations

import json
import uuid

import aetcd
from tamto_functions.specs import STATE_PREFIX, SpecStore, from_json


async def test_delete_removes_spec_key_statuses_and_window_state(
    etcd_client: aetcd.Client,
) -> None:
    name = f"fn-{uuid.uuid4().hex[:8]}"
    document = {
        "name": name,
        "inputs": ["in"],
        "output": "out",
        "code": {"steps": [{"filter": "true"}]},
        "identity": "i",
    }
    store = SpecStore(etcd_client)
    await store.put(from_json(json.dumps(document)), "tamto_0123456789ab_secret")
    await store.put_status(name, f"{name}#0", {"node": "p-1"})
    await etcd_client.put(f"{STATE_PREFIX}{name}/{name}#0".encode(), b"[]")
    other = f"{name}x"  # a name this one prefixes keeps its own
    await etcd_client.put(f"{STATE_PREFIX}{other}/{other}#0".encode(), b"[]")

    assert await store.delete(name) is True
    assert (await store.get(name), await store.api_key(name)) == (None, None)
    assert await store.statuses(name) == {}
    assert list(await etcd_client.get_prefix(f"{STATE_PREFIX}{name}/".encode())) == []
    assert await etcd_client.get(f"{STATE_PREFIX}{other}/{other}#0".encode()) is not None
    assert await store.delete(name) is False
    await etcd_client.delete_prefix(f"{STATE_PREFIX}{other}/".encode())
