"""What the gateway checks in a function spec before storing it, and statuses read back."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tamto_functions.specs import from_json

from tamto_common.errors import InvalidArgument
from tamto_gateway.functions import check_code, instance_status, streams_written


def spec(code: dict[str, Any]) -> Any:
    document = {"name": "f", "inputs": ["in"], "output": "out", "code": code, "identity": "i"}
    return from_json(json.dumps(document))


def python(source: str, entry: str = "mod:run") -> Any:
    return spec({"python": {"entry": entry, "source": source}})


def test_declarative_steps_are_compiled_at_deploy() -> None:
    check_code(spec({"steps": [{"filter": "a > 1"}]}))
    with pytest.raises(
        InvalidArgument, match=r"code\.steps\[0\]\.filter: invalid expression 'a >'"
    ):
        check_code(spec({"steps": [{"filter": "a >"}]}))
    with pytest.raises(InvalidArgument, match=r"code\.steps\[0\]"):
        check_code(spec({"steps": [{"explode": "a"}]}))


@pytest.mark.parametrize(
    "source",
    [
        "def run(batch):\n    return batch\n",
        "class run:\n    pass\n",
        "run = len\n",
        "from json import dumps as run\n",
    ],
)
def test_an_uploaded_entry_defined_at_top_level_is_accepted(source: str) -> None:
    check_code(python(source))


def test_uploaded_source_is_compiled_never_run() -> None:
    check_code(python("raise SystemExit('ran')\ndef run(b):\n    return b\n"))
    with pytest.raises(InvalidArgument, match=r"code\.source: line 1"):
        check_code(python("def run(b)\n    return b\n"))
    with pytest.raises(InvalidArgument, match="defines no 'run'"):
        check_code(python("def other(b):\n    return b\n"))


def test_an_import_path_is_left_to_the_processing_nodes() -> None:
    check_code(spec({"python": {"entry": "not_installed_here:run"}}))


def test_streams_written_include_every_route_target() -> None:
    route = {"by": "region", "outputs": {"eu": "orders-eu", "us": "out"}, "default": "rest"}
    found = streams_written(
        spec({"steps": [{"parse_json": {"fields": {"region": "string"}}}, {"route": route}]})
    )
    assert found == ["out", "orders-eu", "rest"]


def test_a_status_gives_a_rate_since_the_instance_started() -> None:
    reported = {
        "node": "p-1",
        "version": 2,
        "processed": 300,
        "started_at": 10.0,
        "updated_at": 13.0,
    }
    status = instance_status("f#0", reported)
    assert (status.node, status.version, status.processed, status.rate) == ("p-1", 2, 300, 100.0)
    assert instance_status("f#1", {"node": "p-2", "last_error": "boom"}).rate == 0.0
