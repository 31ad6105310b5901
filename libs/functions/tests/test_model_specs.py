"""Function specs: validation names the bad field; JSON round-trips."""

from __future__ import annotations

import pytest
from tamto_functions.model import State
from tamto_functions.specs import from_json, to_json

from tamto_common.errors import InvalidArgument
from tamto_testing.function_specs import spec_json


def test_a_spec_round_trips_through_its_json() -> None:
    spec = from_json(spec_json())
    assert from_json(to_json(spec)) == spec
    assert spec.instances() == ["enrich#0", "enrich#1", "enrich#2"]
    assert spec.subscription == "fn-enrich"
    assert spec.dead_letters == "enrich.dlq"


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"name": "Bad Name"}, "name:"),
        ({"inputs": []}, "inputs:"),
        ({"output": "orders"}, "output:"),
        ({"parallelism": 0}, "parallelism:"),
        ({"identity": ""}, "identity:"),
        ({"code": {"python": {"entry": "no_colon"}}}, "code.entry:"),
        ({"code": {}}, "code:"),
    ],
)
def test_a_bad_spec_is_refused_naming_the_field(changes: dict[str, object], named: str) -> None:
    with pytest.raises(InvalidArgument, match=named):
        from_json(spec_json(**changes))


def test_a_paused_function_has_no_instances() -> None:
    assert from_json(spec_json(state=State.PAUSED.value)).instances() == []


def test_a_parallel_window_function_needs_its_keys_on_one_instance_each() -> None:
    window = {"window": {"size_s": 60, "key": "key", "aggregates": {"n": ["count", "x"]}}}
    by_region = {"window": {"size_s": 60, "key": "region", "aggregates": {"n": ["count", "x"]}}}
    keyed = [{"stream": "orders", "subscription": "key_shared"}]
    shared = [{"stream": "orders", "subscription": "shared"}]
    assert from_json(spec_json(inputs=keyed, code={"steps": [window]})).parallelism == 3
    for inputs, step in ((shared, window), (keyed, by_region)):
        with pytest.raises(InvalidArgument, match="parallelism: a window function"):
            from_json(spec_json(inputs=inputs, code={"steps": [step]}))
    assert from_json(spec_json(inputs=shared, code={"steps": [by_region]}, parallelism=1))
