"""A sample processing-function spec, as JSON, for the tests of specs and of what
runs them (one sample, so a change to the spec format changes it once)."""

from __future__ import annotations

import json

#: A valid spec: a declarative filter over a key-shared input, three instances.
SAMPLE_SPEC = {
    "name": "enrich",
    "inputs": [{"stream": "orders", "subscription": "key_shared"}],
    "output": "enriched",
    "code": {"steps": [{"filter": "true"}]},
    "identity": "fn-enrich",
    "parallelism": 3,
}


def spec_json(**changes: object) -> str:
    """`SAMPLE_SPEC` with `changes` to its top-level fields, as JSON."""
    return json.dumps({**SAMPLE_SPEC, **changes})
