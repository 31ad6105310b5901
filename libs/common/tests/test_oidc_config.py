"""The OIDC issuers file: accepted shapes, and one precise error for each bad one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tamto_common.errors import ConfigError
from tamto_common.oidc import DEFAULT_ALGORITHMS, load_issuers


def write(tmp_path: Path, content: Any) -> Path:
    path = tmp_path / "issuers.json"
    path.write_text(json.dumps(content))
    return path


GOOD = {"name": "corp", "issuer": "https://i", "audience": "a", "jwks_file": "/k.json"}


def test_a_good_file(tmp_path: Path) -> None:
    (issuer,) = load_issuers(write(tmp_path, [GOOD]))
    assert issuer.name == "corp"
    assert issuer.algorithms == DEFAULT_ALGORITHMS


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({**GOOD, "algorithms": ["HS256"]}, "algorithms must be among"),
        ({**GOOD, "algorithms": ["none"]}, "algorithms must be among"),
        ({**GOOD, "jwks_url": "https://x"}, "exactly one of jwks_file and jwks_url"),
        ({k: v for k, v in GOOD.items() if k != "audience"}, "non-empty string 'audience'"),
        ({**GOOD, "name": "Has:Colon"}, "illegal name"),
        ({**GOOD, "extra": 1}, "unknown field(s) extra"),
        ({**{k: v for k, v in GOOD.items() if k != "jwks_file"}, "jwks_url": "ftp://x"}, "http(s)"),
    ],
)
def test_bad_entries(tmp_path: Path, entry: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError, match="--oidc-issuers-file") as info:
        load_issuers(write(tmp_path, [entry]))
    assert problem in str(info.value)


def test_duplicate_issuer(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="listed twice"):
        load_issuers(write(tmp_path, [GOOD, {**GOOD, "name": "other"}]))


def test_unreadable_or_not_json(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_issuers(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ConfigError, match="is not JSON"):
        load_issuers(tmp_path / "bad.json")
