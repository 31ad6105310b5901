"""`tamto storage verify` on a node whose local segment copies were reclaimed because the
segment store holds them: missing without the store, present with it (`StoreHeld`),
and missing again when the store's object is gone or not the size its manifest lists."""

from __future__ import annotations

from pathlib import Path

from test_storage_segment_store import PID, Node
from typer.testing import CliRunner

from tamto_cli.storage_cmds import storage_app
from tamto_protocol.segment import segment_file_name
from tamto_storage.scrub import verify
from tamto_storage.segment_store import SegmentStore
from tamto_storage.store_held import StoreHeld


async def reclaimed_node(tmp_path: Path) -> tuple[Path, SegmentStore]:
    """A stopped node's data directory whose three segments are only in the store."""
    store = SegmentStore.open((tmp_path / "store").as_uri())
    node = Node(tmp_path / "a", store, segment_bytes=1, cache_bytes=1 << 20)
    node.publishes = True
    try:
        await node.append(0, 9)
        await node.seal()
        partition = await node.store.get(PID.stream, PID.partition)
        assert [s.path.exists() for s in partition.segment_log.segments] == [False] * 3
    finally:
        await node.store.close()
    return node.data, store


async def test_segments_the_store_holds_are_not_missing(tmp_path: Path) -> None:
    data, store = await reclaimed_node(tmp_path)
    alone = verify(data)
    assert [(f.kind, f.first_offset, f.last_offset) for f in alone] == [("segment", 0, 8)]
    assert "missing" in alone[0].problem
    assert verify(data, held=StoreHeld(store)) == []

    # An object gone from the store, or not the size its manifest lists: missing again.
    store.delete(PID.stream, PID.partition, segment_file_name(3, 5))
    store.put(PID.stream, PID.partition, segment_file_name(6, 8), lambda out: out.write(b"x"))
    left = verify(data, held=StoreHeld(store))
    assert [(f.first_offset, f.last_offset) for f in left] == [(3, 8)]


async def test_the_cli_takes_the_segment_store(tmp_path: Path) -> None:
    data, store = await reclaimed_node(tmp_path)
    runner = CliRunner()
    alone = runner.invoke(storage_app, ["verify", "--data-dir", str(data)], env={})
    assert alone.exit_code == 1
    assert "missing" in alone.output
    uri = store.uri
    with_store = runner.invoke(
        storage_app, ["verify", "--data-dir", str(data), "--segment-store", uri], env={}
    )
    assert with_store.exit_code == 0, with_store.output
    assert "no damage found" in with_store.output
    from_env = runner.invoke(
        storage_app,
        ["verify", "--data-dir", str(data)],
        env={"TAMTO_STORAGE_SEGMENT_STORE": uri},
    )
    assert from_env.exit_code == 0, from_env.output
