"""The order pipeline's streams and function specs, named after one run's prefix.

raw order events → `validate` (declarative: parse, drop test traffic, key by customer,
route each order to `valid` or `rejected`; unparseable JSON to `validate`'s dead-letter
stream with the error) → `enrich` (Python, uploaded: region name, tax, total) →
`revenue` (declarative tumbling window: revenue and orders per region per window).
Every input is read `key_shared`, so each customer's orders stay in order end to end.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REGIONS = ("eu", "us", "apac")


@dataclass(frozen=True, slots=True)
class Streams:
    """The streams of one run, all named `<prefix>.<role>`."""

    prefix: str

    @property
    def raw(self) -> str:
        return f"{self.prefix}.raw"

    @property
    def valid(self) -> str:
        return f"{self.prefix}.valid"

    @property
    def rejected(self) -> str:
        return f"{self.prefix}.rejected"

    @property
    def enriched(self) -> str:
        return f"{self.prefix}.enriched"

    @property
    def revenue(self) -> str:
        return f"{self.prefix}.revenue"

    @property
    def dead_letters(self) -> str:
        """Where `validate` puts what it cannot parse (its function's dead-letter stream)."""
        return f"{self.prefix}-validate.dlq"

    def partitions(self) -> dict[str, int]:
        """Every stream the run ensures, with its partitions."""
        return {self.raw: 4, self.valid: 4, self.rejected: 1, self.enriched: 4, self.revenue: 1}


def validate_spec(streams: Streams, identity: str) -> dict[str, Any]:
    regions = ", ".join(f"'{r}'" for r in REGIONS)
    is_valid = (
        f"CASE WHEN amount > 0 AND customer IS NOT NULL AND region IN ({regions}) "
        "THEN 'valid' ELSE 'rejected' END"
    )
    fields = {
        "order_id": "string",
        "customer": "string",
        "region": "string",
        "channel": "string",
        "amount": "float",
        "seq": "int",
    }
    return {
        "name": f"{streams.prefix}-validate",
        "inputs": [{"stream": streams.raw, "subscription": "key_shared"}],
        "output": streams.valid,
        "identity": identity,
        "parallelism": 2,
        "code": {
            "steps": [
                {"parse_json": {"fields": fields}},
                {"filter": "channel <> 'test'"},
                {"set_key": "customer"},
                {"project": list(fields)},
                {
                    "route": {
                        "by": is_valid,
                        "outputs": {"valid": streams.valid, "rejected": streams.rejected},
                    }
                },
            ]
        },
    }


def enrich_spec(streams: Streams, identity: str) -> dict[str, Any]:
    source = (HERE / "enrich.py").read_text()
    return {
        "name": f"{streams.prefix}-enrich",
        "inputs": [{"stream": streams.valid, "subscription": "key_shared"}],
        "output": streams.enriched,
        "identity": identity,
        "parallelism": 2,
        "code": {"python": {"entry": "enrich:enrich", "source": source}},
    }


def revenue_spec(streams: Streams, identity: str, window_s: int, lateness_s: int) -> dict[str, Any]:
    """One instance: a window aggregates what its instance receives (docs/processing.md)."""
    window = {
        "size_s": window_s,
        "key": "region",
        "time": "publish_time",
        "lateness_s": lateness_s,
        "aggregates": {"revenue": ["sum", "total"], "orders": ["count", "total"]},
    }
    return {
        "name": f"{streams.prefix}-revenue",
        "inputs": [{"stream": streams.enriched, "subscription": "key_shared"}],
        "output": streams.revenue,
        "identity": identity,
        "parallelism": 1,
        "code": {
            "steps": [
                {"parse_json": {"fields": {"region": "string", "total": "float"}}},
                {"window": window},
            ]
        },
    }
