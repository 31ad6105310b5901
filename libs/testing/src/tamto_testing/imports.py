"""What importing a module loads, seen from a fresh interpreter.

A service's start is mostly its imports, so tests keep heavy packages out of what
`python -m <service>` imports; they ask here which top-level packages importing a
module brings in, without the test process's own imports in the way.
"""

from __future__ import annotations

import json
import subprocess
import sys

#: Imports argv[1] and prints the top-level modules loaded by then.
_IMPORT_AND_LIST = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""


def loaded_by_import(module: str) -> set[str]:
    """The top-level packages a fresh interpreter has loaded after importing `module`."""
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_AND_LIST, module],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return set(json.loads(done.stdout))
