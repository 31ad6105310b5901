"""Code loading (uploaded or imported) and the placement of instances over processing nodes."""

from __future__ import annotations

import pyarrow as pa
import pytest
from tamto_functions.model import PythonCode
from tamto_functions.specs import from_json
from tamto_processing.placement import assigned
from tamto_processing.python_code import load

from tamto_common.errors import InvalidArgument
from tamto_testing.function_specs import spec_json


def test_uploaded_code_runs_and_an_unknown_import_is_refused() -> None:
    source = "def upper(payload):\n    return payload.upper()\n"
    function = load(PythonCode("mod:upper", source, per_message=True))
    batch = pa.record_batch(
        {"offset": pa.array([4, 5], pa.int64()), "payload": pa.array([b"a", b"b"], pa.binary())}
    )
    result = function(batch)
    assert result.column("payload").to_pylist() == [b"A", b"B"]
    assert result.column("offset").to_pylist() == [4, 5]
    with pytest.raises(InvalidArgument, match="cannot import 'no_such_module_here'"):
        load(PythonCode("no_such_module_here:f"))
    with pytest.raises(InvalidArgument, match="has no 'missing'"):
        load(PythonCode("json:missing"))


def test_every_instance_runs_on_exactly_one_node_and_few_move_when_one_leaves() -> None:
    specs = [from_json(spec_json(name=f"f{i}", parallelism=4)) for i in range(10)]
    nodes = ["p-1", "p-2", "p-3"]
    before = {n: set(assigned(specs, nodes, n)) for n in nodes}
    every = [i for spec in specs for i in spec.instances()]
    assert sorted(i for share in before.values() for i in share) == sorted(every)
    after = {n: set(assigned(specs, nodes[:2], n)) for n in nodes[:2]}
    moved = sum(len(after[n] - before[n]) for n in after)
    assert moved == len(before["p-3"])
