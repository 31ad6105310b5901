"""What starting a storage node imports: the Iceberg stack only with a catalog.

Every test cluster starts storage nodes, and a node's start is mostly its imports;
pyiceberg brings pandas and SQLAlchemy, over a CPU second at every start, for the
nodes that publish no Iceberg table (`--iceberg-catalog` unset). The test imports
what `python -m tamto_storage` imports in a fresh interpreter and fails if that
loads the Iceberg stack again.
"""

from __future__ import annotations

import json
import subprocess
import sys

#: Imports the storage node's entry point and prints the top-level modules loaded.
IMPORT_AND_LIST = """
import json, sys
import tamto_storage.__main__
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""


def test_a_storage_node_without_a_catalog_loads_no_iceberg_stack() -> None:
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_AND_LIST],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded = set(json.loads(done.stdout))
    assert "tamto_storage" in loaded
    assert loaded & {"pyiceberg", "pandas", "sqlalchemy"} == set()
