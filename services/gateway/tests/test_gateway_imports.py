"""What starting a gateway imports: polars only when a declarative function comes.

Every test cluster starts one or two gateways, and a gateway's start is mostly its
imports. The gateway compiles declarative function steps (polars expressions) only
to check a spec it is given, so polars is imported then, not at every start. The
test imports what `python -m tamto_gateway` imports in a fresh interpreter and fails
if that loads polars again.
"""

from __future__ import annotations

import json
import subprocess
import sys

#: Imports the gateway's entry point and prints the top-level modules loaded.
IMPORT_AND_LIST = """
import json, sys
import tamto_gateway.__main__
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""


def test_a_gateway_loads_polars_only_to_check_a_declarative_function() -> None:
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_AND_LIST],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded = set(json.loads(done.stdout))
    assert "tamto_gateway" in loaded
    assert "polars" not in loaded
