"""What starting a storage node imports: the Iceberg stack only with a catalog.

Every test cluster starts storage nodes, and a node's start is mostly its imports;
pyiceberg brings pandas and SQLAlchemy, over a CPU second at every start, for the
nodes that publish no Iceberg table (`--iceberg-catalog` unset). The test imports
what `python -m tamto_storage` imports in a fresh interpreter and fails if that
loads the Iceberg stack again.
"""

from __future__ import annotations

from tamto_testing.imports import loaded_by_import


def test_a_storage_node_without_a_catalog_loads_no_iceberg_stack() -> None:
    loaded = loaded_by_import("tamto_storage.__main__")
    assert "tamto_storage" in loaded
    assert loaded & {"pyiceberg", "pandas", "sqlalchemy"} == set()
