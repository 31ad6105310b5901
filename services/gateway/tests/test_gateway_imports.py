"""What starting a gateway imports: polars only when a declarative function comes.

Every test cluster starts one or two gateways, and a gateway's start is mostly its
imports. The gateway compiles declarative function steps (polars expressions) only
to check a spec it is given, so polars is imported then, not at every start. The
test imports what `python -m tamto_gateway` imports in a fresh interpreter and fails
if that loads polars again.
"""

from __future__ import annotations

from tamto_testing.imports import loaded_by_import


def test_a_gateway_loads_polars_only_to_check_a_declarative_function() -> None:
    loaded = loaded_by_import("tamto_gateway.__main__")
    assert "tamto_gateway" in loaded
    assert "polars" not in loaded
